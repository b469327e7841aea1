#!/usr/bin/env bash
# Pack the cp312 wheels of .whl/ (../shared/gpu/fetch-wheels.sh) into .whl/site.tar.xz, the
# form gpu_session.sh unpacks on the GPU machine: a device call carries at most 64 MiB with the
# tracked files, and the cutlass-dsl 4.3.5 wheel alone is 58.6 MB. Its one 143 MB library packs
# to 39.9 MB with xz's x86 filter at preset 9e (43.7 MB at xz's default preset, too much beside
# the 26 MB of tracked files on 2026-12-02). The wheels are moved out of .whl/ afterwards (they
# would travel too); the script prints where, and the sizes against the limit. About 3 minutes.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
ls .whl/*.whl >/dev/null
tmp=$(mktemp -d)
mkdir -p "$tmp/site" "$tmp/wheels"
for w in .whl/*.whl; do
  python3 -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$w" "$tmp/site"
done
(cd "$tmp/site" && tar -cf - . | xz --x86 --lzma2=preset=9e,dict=192MiB -T1) > .whl/site.tar.xz.part
mv .whl/*.whl "$tmp/wheels/"
mv .whl/site.tar.xz.part .whl/site.tar.xz
rm -rf "$tmp/site"
site=$(stat -c %s .whl/site.tar.xz)
tree=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
echo "site.tar.xz $site B + tracked files $tree B = $((site + tree)) B (a device call carries at most 67108864 B)"
echo "the wheels are now in $tmp/wheels"
