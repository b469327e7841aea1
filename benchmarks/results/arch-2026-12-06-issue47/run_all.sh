#!/bin/bash
# Reruns every metric. Needs the worktrees /tmp/m47/before (2af54cc) and /tmp/m47/after (main); creates them if absent.
set -eu
cd /tmp/m47
PY=/work/main/.venv/bin/python
[ -d before ] || git -C /work/main worktree add --detach /tmp/m47/before 2af54cc
# "after" = the main that was measured (81d022e); main later moved to b5724d7 (lab/ and tests/ only). Override with AFTER_REV=main.
[ -d after ] || git -C /work/main worktree add --detach /tmp/m47/after "${AFTER_REV:-81d022e}"
for t in before after; do
  git -C $t rev-parse HEAD > commit_$t.txt
  $PY ast_metrics.py $t --json $t.json                                  # metrics 1, 2, 3, 6A/6B
  (cd $t && PYTHONPATH=$PWD $PY /tmp/m47/cli_options.py > /tmp/m47/cli_$t.json)   # metric 4
  ./tracked_bytes.sh $t > bytes_$t.txt                                  # metric 5
  $PY dp_names_flow.py $t --list > dp_flow_$t.txt                       # metric 6C
  (cd $t && PYTHONPATH=$PWD /work/main/.venv/bin/lint-imports --no-cache > /tmp/m47/lint_imports_$t.txt 2>&1 || true)
  (cd $t && PYTHONPATH=$PWD $PY /tmp/m47/grimp_check.py /tmp/m47/$t.json > /tmp/m47/grimp_$t.txt)
  grep -rnE '^\s*\w+\s*=\s*\S+\.(device_profile|device|profile)\b' $t/l2sched --include=*.py > dp_attr_reads_$t.txt || true
done
$PY make_report.py
