#!/usr/bin/env bash
# A sharded detfuzz campaign as a Slurm job array: task i runs shard
# (SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN) of SLURM_ARRAY_TASK_COUNT, read by detfuzz itself.
#   sbatch ci/slurm/detfuzz-array.sh [FUZZ ARGUMENTS...]      then, once all tasks are done:
#   build/detfuzz merge --out reports/nightly-merged reports/nightly-shard-*
# Arguments go to `detfuzz fuzz`; the defaults below (--backend auto, --seed <date>, --budget 30m,
# --out reports/nightly-shard-<task>) are passed only where the arguments give no such flag.
#SBATCH --job-name=detfuzz-nightly
#SBATCH --array=0-3
#SBATCH --gres=gpu:1
#SBATCH --time=00:40:00
#SBATCH --signal=TERM@120   # to the job step (srun): detfuzz finishes its report, exits 143
set -u
root=${DETFUZZ_ROOT:-$(pwd)}
# shellcheck source=ci/flags.sh
source "$root/ci/flags.sh"
defaults=()
default_flag --backend auto "$@"
default_flag --seed "$(date -u +%Y%m%d)" "$@"
default_flag --budget 30m "$@"
default_flag --out "$root/reports/nightly-shard-$SLURM_ARRAY_TASK_ID" "$@"
status=0
srun "$root/build/detfuzz" fuzz ${defaults[@]+"${defaults[@]}"} "$@" || status=$?
# 1: a must-hold failure, judged after the merge; 143: the time limit's SIGTERM, the report is finished.
[ "$status" -le 1 ] || [ "$status" -eq 143 ] || exit "$status"
