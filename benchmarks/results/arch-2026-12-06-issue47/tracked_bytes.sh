#!/bin/bash
# Metric 5: tracked bytes of a tree and its 5 largest tracked text files.
# usage: tracked_bytes.sh TREE
set -eu
cd "$1"
echo "files: $(git ls-files | wc -l)"
echo "total (git ls-files -z | xargs -0 du -cb):"
git ls-files -z | xargs -0 du -cb | grep -P '\ttotal$' | awk '{s+=$1} END {print s}'
echo "total (sum of per-file sizes, stat -c %s):"
git ls-files -z | xargs -0 stat -c '%s' | awk '{s+=$1} END {print s}'
echo "text = git's own test: not shown as '-' by 'git diff --numstat <empty tree> HEAD' (binary); the working tree equals HEAD"
git diff --numstat 4b825dc642cb6eb9a060e54bf8d69288fbee4904 HEAD | awk -F'\t' '$1=="-"{print $3}' > /tmp/m47/.binary_$$.txt
echo "binary tracked files: $(wc -l < /tmp/m47/.binary_$$.txt)"
git ls-files -z | xargs -0 stat -c '%s %n' | sort -rn | while read -r sz name; do
  grep -qxF "$name" /tmp/m47/.binary_$$.txt || echo "$sz $name"
done | head -5
echo "largest tracked files of any kind:"
git ls-files -z | xargs -0 stat -c '%s %n' | sort -rn | head -5
rm -f /tmp/m47/.binary_$$.txt
