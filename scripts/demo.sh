#!/bin/sh
# Start a local olliesrv (or reuse the one already serving) and show its
# namespace with the ollie client. Run from the repository: make run.
set -eu
cd "$(dirname "$0")/.."
PATH=$PWD/bin:$PATH
log=${TMPDIR:-/tmp}/olliesrv.$(id -u).log

if ollie stat / >/dev/null 2>&1; then
	echo "== olliesrv is already running"
else
	echo "== starting olliesrv (log: $log)"
	nohup olliesrv >"$log" 2>&1 &
	i=0
	until ollie stat / >/dev/null 2>&1; do
		i=$((i + 1))
		if [ $i -gt 50 ]; then
			echo "olliesrv did not start; its log:" >&2
			cat "$log" >&2
			exit 1
		fi
		sleep 0.1
	done
fi

run() { echo; echo "\$ $*"; "$@"; }
run ollie ls /
run sh -c 'echo name=demo-$$ | ollie rdwr session/new'
run ollie read session/idx
run ollie ls session
run ollie read help
cat <<MSG

olliesrv keeps running. Next:
  bin/ollie                      a shell on the namespace (cd, ls, cat, echo > file)
  echo 'session.*' | bin/ollie rdwrs event    follow session events
  echo kill | bin/ollie rdwr ctl              stop olliesrv
MSG
