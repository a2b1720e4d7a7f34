# Each attribute below exercises one rule of Elixir string literals. The
# expected value of each is written out by hand in rules_test.go, and its
# SHA-1 was computed by Elixir itself (see oracle.exs).
defmodule Rules do
  @moduledoc "Not a script: #{1 + 1} is interpolated, and that is fine here."

  # Heredoc: the closing delimiter's indentation (six spaces) is stripped
  # from every line.
  @indent """
      local a = 1
        local b = 2
      return a + b
      """

  # Heredoc closed at column 0: nothing is stripped.
  @flush """
  kept as is
"""

  # Escapes of a plain string.
  @escapes "\0\a\b\d\e\f\n\r\s\t\v|\\|\"|\#{x}|\x41\xff|\u00e9\u{1F600}|\q|\#"

  # Escapes inside a heredoc, and a triple quote escaped in it.
  @heredoc_escapes """
    tab\there \"quoted\" \"""triple\""" #\{brace} \#{x}
    """

  # A backslash at the end of a line removes the new line; the next line's
  # indentation is still stripped, since stripping comes before escapes.
  @continued """
    redis.call('SET', KEYS[1], \
      ARGV[1])
    return 1\
    """

  # Plain strings: a continuation keeps the next line's leading spaces, and
  # a raw new line is part of the string.
  @plain "line one\n\
  line two"
  @multiline "a
  b"

  # ~S takes the bytes raw (no escapes, no interpolation) but a heredoc's
  # indentation is still stripped; an escaped triple quote loses its backslash.
  @raw ~S"""
    no \n escape, no #{interpolation}, \
    continuation kept \"""
    """
  @raw_line ~S|a\nb#{c}|

  # ~s evaluates escapes like a string.
  @lower ~s(tab\tend)

  # A line indented less than the closing delimiter loses only what it has
  # (Elixir warns "outdented heredoc line"); a blank line shorter than the
  # indentation becomes empty.
  @outdented """
      deep
    normal
  shallow
  
          
    """

  # The closing delimiter indented by tabs: a tab counts as one column.
	@tabs """
			three tabs
		  two spaces
		"""

  # An empty heredoc, and whitespace after the opening delimiter.
  @empty """
  """
  @spaced """   	
    x
    """ # a comment after the closing delimiter

  def quote_char, do: ?"
  # @commented "not an attribute"
  def text, do: "@inside \"a string\" @x \"y\""

  def all do
    [
      indent: @indent,
      flush: @flush,
      escapes: @escapes,
      heredoc_escapes: @heredoc_escapes,
      continued: @continued,
      plain: @plain,
      multiline: @multiline,
      raw: @raw,
      raw_line: @raw_line,
      lower: @lower,
      outdented: @outdented,
      tabs: @tabs,
      empty: @empty,
      spaced: @spaced
    ]
  end
end
