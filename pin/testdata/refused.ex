# Attributes whose value is not a fixed string: each must be refused with
# the file, the line and the attribute named.
defmodule Refused do
  @other "x"

  @interp """
    return #{@other}
    """

  @charlist 'return 1'

  @piped """
    return 1
    """
    |> String.trim()

  @concat "return " <> "1"

  @computed File.read!("enqueue.lua")

  @modified ~S"return 1"u

  @dup "return 1"
  @dup "return 2"

  @badescape "\xZZ"
end
