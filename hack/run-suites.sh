#!/usr/bin/env bash
# make test's runner (the top Makefile's `test`): set-up, lint, then the suites in lanes.
#
#   hack/run-suites.sh KEEP_GOING "LAST targets" "LANE 1's targets" ["LANE 2's targets" ...]
#
# Lane 1 runs its targets one after another with their output on stdout, as make test always
# did. Every further lane runs its own targets one after another at the same time, each target's
# output into out/test-logs/<target>.log; that log is printed whole, under a header, after the
# lane-1 target during which it ended (or at the end), so no two suites' lines interleave. When
# every lane has ended, the LAST targets run one after another with nothing beside them. Each
# target gets its "make test: X took N s" line, the end a table of them in TEST_ORDER's order and
# the FAILED line. KEEP_GOING=1 (make -k): every target runs whatever fails; otherwise a failure
# stops each lane before its next target (the others' running targets finish).
# Leaves out: choosing the lanes (the Makefile's TEST_BESIDE and TEST_LAST say why those suites).
set -uo pipefail
cd "$(dirname "$0")/.."
keep_going=$1
last=$2
shift 2
MAKE=${MAKE:-make}
logs=out/test-logs
rm -rf "$logs"
mkdir -p "$logs"
start=$(date +%s)
stop="$logs/.stop"

# One target: its rc, seconds and end into $logs/<target>.done ("rc seconds end").
run_one() {
	local t=$1 out=$2 t0 rc=0
	t0=$(date +%s)
	if [[ $out == - ]]; then
		$MAKE --no-print-directory "$t" || rc=$?
	else
		$MAKE --no-print-directory "$t" >"$out" 2>&1 || rc=$?
	fi
	echo "$rc $(($(date +%s) - t0)) $(($(date +%s) - start))" >"$logs/$t.done"
	if [[ $rc != 0 && $keep_going != 1 ]]; then touch "$stop"; fi
	return "$rc"
}

took_line() {
	local t=$1 rc secs end
	read -r rc secs end <"$logs/$t.done"
	echo "make test: $t took $secs s (rc $rc; $end s in all)"
}

# Logs of other lanes' targets that have ended, each printed once.
printed=" "
flush() {
	local done t
	for done in "$logs"/*.done; do
		[[ -e $done ]] || continue
		t=$(basename "$done" .done)
		[[ $printed == *" $t "* || ! -e "$logs/$t.log" ]] && continue
		printed="$printed$t "
		echo "make test: ---- $t's output (it ran beside the suites above) ----"
		cat "$logs/$t.log"
		echo "make test: ---- end of $t's output ----"
		took_line "$t"
	done
}

# Targets one after another here, output on stdout, other lanes' ended logs printed after each.
in_turn() {
	local t
	# shellcheck disable=SC2086 # a lane is a space-separated list of targets
	for t in $1; do
		[[ -e $stop ]] && break
		run_one "$t" -
		took_line "$t"
		flush
	done
}

# shellcheck disable=SC2206 # every target named, each a word
all=(prepare lint $last "$@")
# Set-up first (its failure ends make test, as before), then lint on its own.
t0=$(date +%s)
$MAKE --no-print-directory prepare || exit $?
echo "0 $(($(date +%s) - t0)) $(($(date +%s) - start))" >"$logs/prepare.done"
echo "make test: set-up done after $(($(date +%s) - start)) s"
run_one lint -
took_line lint

pids=()
if [[ ! -e $stop ]]; then
	lane1=$1
	shift
	for lane in "$@"; do
		# shellcheck disable=SC2086 # a lane is a space-separated list of targets
		(for t in $lane; do
			[[ -e $stop ]] && break
			run_one "$t" "$logs/$t.log"
		done) &
		pids+=($!)
	done
	in_turn "$lane1"
fi
for pid in "${pids[@]}"; do
	wait "$pid"
	flush
done
flush
in_turn "$last"

# The table, in the order of the Makefile's TEST_TARGETS (prepare, lint first).
times="" failed=""
for t in prepare lint $TEST_ORDER; do
	[[ " ${all[*]} " == *" $t "* ]] || continue  # a target of no lane: not asked for
	if [[ ! -e "$logs/$t.done" ]]; then
		times+="  $t not run"$'\n'
		continue
	fi
	read -r rc secs end <"$logs/$t.done"
	times+="  $t $secs s$([[ $rc == 0 ]] || echo ' FAILED')"$'\n'
	[[ $rc == 0 ]] || failed+=" $t"
done
printf "make test: wall time per target:\n%s" "$times"
if [[ -n $failed ]]; then
	echo "make test: FAILED:$failed after $(($(date +%s) - start)) s"
	exit 1
fi
echo "make test: all suites passed after $(($(date +%s) - start)) s"
