#!/usr/bin/env bash
# Installs every build and test dependency of Mosaic from Debian 12's own packages.
# Idempotent and non-interactive: a second run installs nothing new. Nothing is fetched from
# anywhere but Debian's archive. Run as root, or as a user with sudo.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config git
  # engine: LibTorch (CPU) with an optimized BLAS — without libopenblas0-openmp LibTorch falls
  # back to reference BLAS and runs ~14x slower
  libtorch-dev libopenblas0-openmp
  libsqlite3-dev sqlite3 nlohmann-json3-dev libcli11-dev
  # `mosaic-cli serve`: the HTTP server (the library llama.cpp's server is built on)
  libcpp-httplib-dev
  # checkpoint content hashes (SHA-256); forge's gzip corpora
  libssl-dev zlib1g-dev
  # tokenizer.json's Split patterns (DeepSeek, Llama 3, Qwen): Unicode properties and look-ahead;
  # its NFC normalizer (Qwen)
  libpcre2-dev libicu-dev
  # forge's sample family trains on public-domain text that Debian ships: the King James Bible
  # (with the `bible` reader), fortunes, the Jargon File; C headers come with libc6-dev
  bible-kjv bible-kjv-text fortunes fortunes-min jargon-text
  # workbench: Qt 6 Widgets/Test/Svg and QCustomPlot's Qt 6 build
  qt6-base-dev qt6-base-dev-tools qt6-svg-dev libqcustomplot-dev libqcustomplot2.1-qt6
  libgl-dev
  # the parsers' fuzz targets (the `fuzz` preset): clang with libFuzzer and its sanitizer runtimes
  clang-14 libclang-rt-14-dev libfuzzer-14-dev
  # headless GUI tests and screenshots; the report's font, and reading its PDF back in tests
  xvfb xauth fonts-dejavu-core poppler-utils
  # the Debian package: `file` (CPack finds the binaries for dpkg-shlibdeps with it), and for its
  # test the desktop entry's, AppStream metainfo's and lintian's checkers
  file desktop-file-utils appstream lintian
)

# The server's client tests run the official `openai` npm package under Node: Debian's nodejs and npm,
# unless a Node with npm is already installed (another Node's packages would conflict with Debian's).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "setup-debian: all ${#packages[@]} packages already installed"
  exit 0
fi

sudo=()
if ((EUID != 0)); then
  command -v sudo >/dev/null || { echo "setup-debian: run as root or install sudo" >&2; exit 1; }
  sudo=(sudo)
fi

echo "setup-debian: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup-debian: done"
