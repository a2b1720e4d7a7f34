defmodule Unterminated do
  @enqueue """
    return 1
  end
