# Prints, for each attribute of the Rules module in rules.ex, the SHA-1 that
# Elixir itself computes for its value, and the value. The expected shas in
# rules_test.go come from this output (Elixir 1.14.0 on Erlang/OTP 24,
# Debian bookworm: apt-get install elixir), run as
#
#   elixir pin/testdata/oracle.exs
#
# The tests do not need Elixir; this script is how their numbers were made.
Code.require_file("rules.ex", __DIR__)

for {name, value} <- Rules.all() do
  sha = :crypto.hash(:sha, value) |> Base.encode16(case: :lower)
  IO.puts("#{name} #{sha} #{inspect(value, binaries: :as_binaries, limit: :infinity)}")
end
