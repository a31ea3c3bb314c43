#!/usr/bin/env bash
# The Debian package as a user gets it: built from this build folder, unpacked with dpkg-deb -x into
# a temporary root and run from there with a bare environment, from a folder outside the source
# tree, so its programs must find their samples from their own install prefix. Then the package's
# metadata through Debian's validators: desktop-file-validate, appstreamcli, lintian (no errors;
# its warnings are printed).
#   check_package.sh BUILD_DIR VERSION
set -euo pipefail
build=$1 version=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
for tool in dpkg-deb desktop-file-validate appstreamcli lintian; do
  command -v "$tool" >/dev/null || fail "$tool is missing: run installer/setup-debian.sh"
done

# Resolved: the programs report their own path resolved too (/proc/self/exe).
work=$(cd "$(mktemp -d)" && pwd -P)
trap 'rm -rf "$work"' EXIT
if ! cmake --build "$build" --target package >"$work/package.log" 2>&1; then
  tail -n 40 "$work/package.log" >&2
  fail "the package target failed: cmake --build $build --target package"
fi
deb="$build/mosaic_${version}_amd64.deb"
[[ -f $deb ]] || fail "the package target wrote no $deb"
root="$work/root"
dpkg-deb -x "$deb" "$root"
share="$root/usr/share/mosaic"
mkdir -p "$work/home" "$work/cwd"
cd "$work/cwd"
# As a user would run it: only the package's bin on PATH besides the system's, nothing of ours set.
run() { env -i HOME="$work/home" PATH="$root/usr/bin:/usr/bin:/bin" QT_QPA_PLATFORM=offscreen LANG=C.UTF-8 "$@"; }

out=$(run mosaic-cli --version) || fail "mosaic-cli --version failed"
[[ $out == "mosaic-cli $version" ]] || fail "mosaic-cli --version said '$out', not 'mosaic-cli $version'"
out=$(run mosaic --version) || fail "mosaic --version failed"
[[ $out == *"$version"* ]] || fail "mosaic --version said '$out'"

out=$(run mosaic-cli inspect "$share/resources/sample-family/base") || fail "inspect of the installed sample family failed"
grep -q "experts" <<<"$out" || fail "inspect printed no experts: $out"
out=$(run mosaic-cli generate --model "$share/resources/sample-family/bible" --prompt "In the beginning" --max-new 4) ||
  fail "generate on the installed sample family failed: $out"
[[ -n $out ]] || fail "generate printed nothing"

# Every path a sample sweep or session names, relative to its folder (variants, profiles, routing
# models), is installed: quoted strings with a slash and no space, other than the schema's name.
mapfile -t configs < <(grep -l -E '"mosaic\.(sweep|session)/1"' "$share"/sample_configs/*.json || true)
((${#configs[@]} >= 5)) || fail "found ${#configs[@]} sample sweeps and sessions in $share/sample_configs, expected at least 5"
checked=0
for cfg in "${configs[@]}"; do
  mapfile -t paths < <(grep -o '"[^" ]*/[^" ]*"' "$cfg" | tr -d '"' || true)
  for rel in "${paths[@]}"; do
    [[ $rel == mosaic.* || $rel == /* ]] && continue
    [[ -e $(dirname "$cfg")/$rel ]] || fail "$(basename "$cfg") names $rel, which the package does not install"
    checked=$((checked + 1))
  done
done
((checked >= 10)) || fail "checked only $checked paths in the sample configs: has their format changed?"

# A QoS sample sweep on the installed tiny family, on the simulated clock (3 s).
out=$(run mosaic-cli bench --config "$share/sample_configs/paper-qos-simulated.json" --db "$work/qos.sqlite" 2>&1) ||
  fail "the installed paper-qos-simulated.json did not run: $out"
grep -q "recorded to $work/qos.sqlite" <<<"$out" || fail "the installed QoS sweep recorded nothing: $out"

# No arguments: the installed sample session, found from the program's own prefix.
out=$(run timeout 300 mosaic --quit-after-load 2>&1) || fail "mosaic --quit-after-load failed: $out"
grep -q "opened 9 variants from $share/sample_configs/sample-session.json" <<<"$out" ||
  fail "mosaic did not open the installed sample session: $out"

# Man pages name every subcommand; the bash completion offers them.
commands=$(run mosaic-cli --help | awk '/^Subcommands:/{on=1; next} on && /^  [a-z]/{print $1}')
[[ -n $commands ]] || fail "mosaic-cli --help lists no subcommands"
page=$(zcat "$root/usr/share/man/man1/mosaic-cli.1.gz" | sed 's/\\-/-/g')  # roff escapes its hyphens
for c in $commands; do grep -q -- "$c" <<<"$page" || fail "the mosaic-cli man page does not mention '$c'"; done
completed=$(bash -c 'source "$1"; COMP_WORDS=(mosaic-cli ""); COMP_CWORD=1; _mosaic_cli; echo "${COMPREPLY[*]}"' _ \
  "$root/usr/share/bash-completion/completions/mosaic-cli")
for c in $commands; do grep -qw -- "$c" <<<"$completed" || fail "bash completion does not offer '$c'"; done

desktop-file-validate "$root/usr/share/applications/mosaic.desktop" || fail "desktop-file-validate"
appstreamcli validate --no-net "$root/usr/share/metainfo/io.github.mosaic_moe.Mosaic.metainfo.xml" || fail "appstreamcli validate"
# lintian exits 1 when it reports errors, anything else but 0 when it could not check at all.
status=0
lintian --tag-display-limit 0 "$deb" >"$work/lintian.log" 2>&1 || status=$?
((status <= 1)) || { cat "$work/lintian.log" >&2; fail "lintian could not check the package (status $status)"; }
tags=$(grep -E '^[EW]: ' "$work/lintian.log" || true)
[[ -n $tags ]] && echo "$tags"
grep -q '^E: ' <<<"$tags" && fail "lintian reports errors"
echo "package $(basename "$deb"): $(du -h "$deb" | cut -f1), installs and runs from $root; validators clean"
