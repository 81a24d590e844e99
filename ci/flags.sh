# Sourced by the ci/ wrappers (fuzz, nightly, gate, slurm/): a wrapper's defaults go to detfuzz
# only where the user's arguments do not give the same flag, as `--flag VALUE` or `--flag=VALUE`
# (CLI11 refuses a flag given twice: "--budget: At Most 1 required but received 2").
#   defaults=()
#   default_flag --budget 60s "$@"
#   detfuzz fuzz ${defaults[@]+"${defaults[@]}"} "$@"

# user_gave FLAG ARGS...: whether ARGS give FLAG.
user_gave() {
  local flag=$1 a
  shift
  for a in "$@"; do
    [[ $a == "$flag" || $a == "$flag="* ]] && return 0
  done
  return 1
}

# default_flag FLAG VALUE ARGS...: appends FLAG VALUE to the array `defaults` unless ARGS give FLAG.
default_flag() {
  local flag=$1 value=$2
  shift 2
  user_gave "$flag" "$@" || defaults+=("$flag" "$value")
}

# user_value FLAG ARGS...: prints the value ARGS give FLAG (the last one); fails when they give none.
user_value() {
  local flag=$1 found=1 value=
  shift
  while [ $# -gt 0 ]; do
    case $1 in
      "$flag") [ $# -ge 2 ] && value=$2 && found=0 && shift ;;
      "$flag="*) value=${1#"$flag="} && found=0 ;;
    esac
    shift
  done
  [ "$found" -eq 0 ] && printf '%s\n' "$value"
}
