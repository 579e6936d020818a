# Source in a GPU record script after setting $out:
#   stage NAME SECONDS CMD...  runs CMD under a timeout, logs it to $out/NAME.log, prints its
#   exit code, time and last $TAIL lines (default 3; STAGE_HIDE: a grep pattern of lines to
#   leave out of that tail), and never aborts the script.
stage() {
  local name=$1 secs=$2; shift 2
  echo "== $name"; local t0=$SECONDS
  timeout "$secs" "$@" >"$out/$name.log" 2>&1; echo "   rc=$? $((SECONDS - t0)) s"
  if [ -n "${STAGE_HIDE:-}" ]; then
    grep -v "$STAGE_HIDE" "$out/$name.log" | tail -n "${TAIL:-3}"
  else
    tail -n "${TAIL:-3}" "$out/$name.log"
  fi
}
