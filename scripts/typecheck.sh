#!/usr/bin/env bash
# `mypy --strict` over dsh.loader and dsh.cli (CI runs this; config in pyproject.toml).
#
# The folders `loader/` and `cli/` install as `dsh.loader` and `dsh.cli` through setuptools'
# package-dir mapping, an import hook mypy cannot follow. So mypy reads them through a throwaway
# `dsh/` tree of two symlinks, and checks the packages by their installed names. Errors name files
# as `dsh/loader/...`: the same path under the repository's `loader/`.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
tree="$(mktemp -d -t dsh-typecheck.XXXXXX)"
trap 'rm -rf "$tree"' EXIT
mkdir "$tree/dsh"
ln -s "$repo/loader" "$tree/dsh/loader"
ln -s "$repo/cli" "$tree/dsh/cli"
cd "$tree"
exec mypy --config-file "$repo/pyproject.toml" --cache-dir "$repo/.mypy_cache" -p dsh.loader -p dsh.cli "$@"
