# Sourced by guest tests (they run inside the guest through `tools/vm run`).
# Each check prints one TAP-style line, "ok - NAME" or "not ok - NAME", that
# tools/check counts; `finish` exits non-zero when any check failed.
# shellcheck shell=bash

_fails=0
_count=0

# check NAME COMMAND...: run COMMAND (output shown), record the result.
check() {
	local name=$1; shift
	_count=$((_count + 1))
	echo "--- $name: $*"
	if "$@"; then
		echo "ok - $name"
	else
		echo "not ok - $name (exit status $?)"
		_fails=$((_fails + 1))
	fi
}

# check_fails NAME COMMAND...: COMMAND must fail (bad input is refused).
check_fails() {
	local name=$1; shift
	_count=$((_count + 1))
	echo "--- $name (must fail): $*"
	if "$@"; then
		echo "not ok - $name (succeeded but must fail)"
		_fails=$((_fails + 1))
	else
		echo "ok - $name"
	fi
}

# expect NAME PATTERN TEXT: TEXT must match the extended regex PATTERN.
expect() {
	local name=$1 pattern=$2 text=$3
	_count=$((_count + 1))
	if grep -Eq -- "$pattern" <<<"$text"; then
		echo "ok - $name"
	else
		echo "not ok - $name: /$pattern/ not found in:"
		sed 's/^/    /' <<<"$text"
		_fails=$((_fails + 1))
	fi
}

finish() {
	echo "guest test $(basename "$0"): $((_count - _fails)) of $_count checks passed"
	[ "$_fails" = 0 ]
}
