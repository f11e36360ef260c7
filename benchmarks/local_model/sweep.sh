#!/usr/bin/env bash
# The paper's Table 3 with the local model (issue 23): `dtdr-agents e2e` on TaskBench-HF and
# Seal-Tools, 60 test plans each, through the model setup.sh serves (adapter constrain=on).
#
#   bash benchmarks/local_model/setup.sh                 # prints http://127.0.0.1:8089/v1
#   nohup nice -n 19 bash benchmarks/local_model/sweep.sh > sweep.log 2>&1 &
#   bash benchmarks/local_model/sweep.sh --dry-run       # calls and prompt tokens, offline
#   bash benchmarks/local_model/sweep.sh --replay        # the figures again, from the caches
#   bash benchmarks/local_model/sweep.sh --dataset sealtools   # one dataset only
#   bash benchmarks/local_model/sweep.sh --retrievers none,bm25 # some cells first (no report)
#
# Every answered step is appended (and fsync'ed) to docs/results/e2e_<dataset>_qwen1.5b.json
# .steps.jsonl before the next is counted; run the same command again after an interruption and
# only the missing steps are asked. When the server stops answering, the run stops with an
# error naming the step (the answers already received stay in the cache). The JSON report is
# written once a dataset's run is complete. Prompt tokens are counted with the MiniLM WordPiece
# tokenizer (--tokens wordpiece, pinned so a replay elsewhere counts the same); it counts about
# a third more than the model's own tokenizer on these prompts (README, "Measured here").
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
SHARED="${DTDR_SHARED_DATASETS:-$ROOT/../shared/datasets}"
BASE_URL="${DTDR_BASE_URL:-http://127.0.0.1:8089/v1}"
CONSTRAIN="on"                  # the adapter's mode (setup.sh --constrain); recorded in the name
MODEL="qwen2.5-coder-1.5b-instruct+constrain-$CONSTRAIN"
OUT="$ROOT/docs/results"
TEST_PLANS=60
MAX_PROMPT_TOKENS=7680          # n_ctx 8192 less the 512-token answer budget (--max-tokens)
MODE="run"
DATASETS="taskbench_hf sealtools"
ALL_RETRIEVERS="none,bm25,dtdr-l-s,hybrid,hybrid@0demos"
RETRIEVERS="$ALL_RETRIEVERS"

usage() {
    cat <<EOF
Usage: bash benchmarks/local_model/sweep.sh [--dry-run | --replay] [--dataset taskbench_hf|sealtools]

  --dry-run     count the calls and prompt tokens offline (no endpoint), cached steps apart
  --replay      no endpoint: rebuild the reports from the step caches alone
  --dataset D   only this dataset (default: taskbench_hf, then sealtools)
  --retrievers R
                only these of the retrievers (comma-separated): their steps go into the
                same caches, but no report is written (the report needs every cell)

Environment: DTDR_BASE_URL (default $BASE_URL), DTDR_SHARED_DATASETS (default $SHARED).
Settings: $TEST_PLANS test plans (TaskBench-HF: the first of its seeded split; Seal-Tools:
a seeded draw from test_in_domain), retrievers none, bm25, dtdr-l-s, hybrid, hybrid@0demos;
modes no_icl (none) and hard_weighted; --tool-choice required, --concurrency 1,
--timeout 900, --max-tokens 512, --max-retries 2, --max-prompt-tokens $MAX_PROMPT_TOKENS
(WordPiece count); model name $MODEL.
EOF
}

while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) MODE="dry-run"; shift ;;
        --replay) MODE="replay"; shift ;;
        --dataset) DATASETS="${2:?--dataset needs a value}"; shift 2 ;;
        --retrievers) RETRIEVERS="${2:?--retrievers needs a value}"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; echo "sweep.sh: error: unknown option: $1" >&2; exit 2 ;;
    esac
done

export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}" TOKENIZERS_PARALLELISM=false
cd "$ROOT"

run() {  # run NAME DATASET-AND-SUBSET-ARGS...
    local name="$1"; shift
    local json="$OUT/e2e_${name}_qwen1.5b.json"
    local steps="$json.steps.jsonl"
    local report=(--json "$json")
    # a subset of the cells fills the cache only: a report of part of the table is not written
    [ "$RETRIEVERS" = "$ALL_RETRIEVERS" ] || report=()
    local args=(
        e2e "$@"
        --retrievers "$RETRIEVERS"
        --modes no_icl,hard_weighted
        --model "$MODEL"
        --max-prompt-tokens "$MAX_PROMPT_TOKENS"
        --tokens wordpiece
        --step-cache "$steps"
    )
    echo "[sweep] $(date -u +%FT%TZ) $name: $MODE" >&2
    local rc=0
    case "$MODE" in
        dry-run)
            dtdr-agents "${args[@]}" --dry-run -q || rc=$? ;;
        replay)
            dtdr-agents "${args[@]}" --replay "${report[@]}" || rc=$? ;;
        run)
            dtdr-agents "${args[@]}" --base-url "$BASE_URL" --tool-choice required \
                --concurrency 1 --timeout 900 --max-tokens 512 --max-retries 2 \
                "${report[@]}" || rc=$? ;;
    esac
    echo "[sweep] $(date -u +%FT%TZ) $name: exit $rc" >&2
    [ "$rc" = 0 ] || STATUS=1
}

STATUS=0

if [ "$MODE" = "run" ]; then
    bash "$HERE/setup.sh" --check >/dev/null || {
        echo "sweep.sh: error: the model is not being served; start it with: bash $HERE/setup.sh" >&2
        exit 1
    }
fi

for name in $DATASETS; do
    case "$name" in
        # TaskBench-HF's test split is a seeded shuffle: its first plans are a random draw
        taskbench_hf) run taskbench_hf --dataset taskbench --path "$SHARED/taskbench_hf_subset" \
            --test-limit "$TEST_PLANS" ;;
        # Seal-Tools' published test_in_domain lists its 200 one-call "easy" plans before its
        # 500 "difficult" ones: the first 60 would all be one-call plans, so draw 60 (seeded)
        sealtools) run sealtools --dataset sealtools --path "$SHARED/sealtools" \
            --train-split dev --test-split test_in_domain --test-sample "$TEST_PLANS" ;;
        *) echo "sweep.sh: error: unknown dataset '$name' (taskbench_hf or sealtools)" >&2; exit 2 ;;
    esac
done
# exit 1 when a dataset's run failed (a step without an answer, or the server went away):
# run the same command again to ask only the missing steps
exit "$STATUS"
