# shellcheck shell=bash
# Shared by the GitHub Action (ci/github/*.sh) and the GitLab template (ci/gitlab/*.sh):
# sourced, not run. What both CI systems do the same way lives here, once:
#
# - the Debian packages the tool runs (the runtime half of scripts/lib/setup.sh's list,
#   checked by tests/unit/ci/test_ci_templates.py);
# - provisioning in the order that lets `doctor` answer: the VM assets and the image
#   first (doctor reports a host without them as unable to lint, whatever its
#   accelerator), then the doctor gate, then the package cache;
# - the pull request's diff, made with the options docs/ADOPTING.md gives;
# - turning inputs into arguments: every input is a value in an environment variable,
#   passed to the tool as one argument (`--flag=VALUE`, a path made absolute), so no
#   input is parsed as shell text or read as another option.
#
# The caller sets CI_KIND to "github" or "gitlab" (how an error is shown in the log).

# qemu-system-x86: the microVM; e2fsprogs: ext4 images without root or loop devices;
# zstd: zstd-compressed image layers. The VM assets need nothing from the host's package
# manager: `prefetch --vm-assets` reads Debian's archive itself (vm/assets/debian_archive.py),
# so the same list installs on Debian and on Ubuntu (GitHub's runners).
RUNTIME_PACKAGES=(qemu-system-x86 e2fsprogs zstd)

# The file under ROTEIRO_HOME where the GitLab lint step records the image it lints with
# (ci/gitlab/lint.sh), which `cache.sh save` keeps alone in the image cache.
# shellcheck disable=SC2034  # read by the scripts that source this one
LINT_IMAGE_RECORD=ci-lint-image

# ci_error MESSAGE: an error the CI shows as such (a GitHub annotation; a plain line in GitLab).
ci_error() {
  if [ "${CI_KIND:-}" = github ]; then
    # A workflow command's data ends at a newline; ours never has one, but a value we
    # quote (a branch name) is made one line anyway.
    printf '::error title=pylint-sandbox::%s\n' "$(printf '%s' "$*" | tr '\r\n' '  ')"
  else
    printf 'pylint-sandbox: error: %s\n' "$*" >&2
  fi
}

# ci_note MESSAGE: a progress line on stderr.
ci_note() {
  printf 'pylint-sandbox: %s\n' "$*" >&2
}

# install_packages [EXTRA...]: the runtime packages (and EXTRA) that dpkg does not have,
# through apt-get, with sudo when not root. Nothing is run when all are installed.
install_packages() {
  local missing=() package
  for package in "${RUNTIME_PACKAGES[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
      || missing+=("$package")
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  ci_note "installing Debian packages: ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

# as_path VALUE: VALUE as an absolute path (relative ones from the current directory), so
# it can never be read as an option: `--image=x` becomes `$PWD/--image=x`. (`./--image=x`
# is not enough: the tool's path parsing makes it `--image=x` again.) Leading `./` go, and
# `.` (the default) is the directory itself, so what the log names reads as a path: it
# asked "can this runner lint /builds/p/.?".
as_path() {
  local value="${1:-.}"
  while [ "${value#./}" != "$value" ]; do value="${value#./}"; done
  case "$value" in
    /*) printf '%s' "$value" ;;
    . | "") printf '%s' "$PWD" ;;
    *) printf '%s/%s' "$PWD" "$value" ;;
  esac
}

# tool_env IMAGE ACCEL: the image and accelerator for every command of the tool, as the
# configuration variables it reads. An empty IMAGE leaves the choice to the repository's
# roteiro.toml (or the runner's own configuration), and so does `build` until
# build_image has made one; ACCEL "auto" (or empty) leaves the runner's configuration in
# charge, whose default is auto.
tool_env() {
  local image="$1" accel="$2"
  if [ -n "$image" ] && [ "$image" != build ]; then
    export ROTEIRO_LINT_IMAGE="$image"
  fi
  if [ -n "$accel" ] && [ "$accel" != auto ]; then
    export ROTEIRO_VM_ACCEL="$accel"
  fi
}

# toolchain_file PATH TOP: the rust-toolchain.toml (or legacy rust-toolchain) rustup would
# read for PATH, looked for from PATH's directory up to TOP (the checkout), never above;
# nothing when there is none. The tool reads it as data (no link, bounded).
toolchain_file() {
  local dir="$1" top="$2" name
  [ -d "$dir" ] || dir="$(dirname "$dir")"
  while :; do
    for name in rust-toolchain.toml rust-toolchain; do
      if [ -e "$dir/$name" ] || [ -L "$dir/$name" ]; then
        printf '%s' "$dir/$name"
        return 0
      fi
    done
    if [ "$dir" = "$top" ] || [ "$dir" = / ]; then
      return 0
    fi
    dir="$(dirname "$dir")"
  done
}

# build_image PATH: `image: build`: make the linter image on this runner and print its
# pinned reference. What the repository pins for PATH (toolchain_file), from Rust's own
# distribution with its signature checked; with no pin, the runner's installed stable
# rustup toolchain (GitHub's and GitLab's Rust images carry one with clippy), as `cargo
# clippy` on this runner would use. --no-set-image: the runner's configuration is left as
# it is; the reference reaches the tool as ROTEIRO_LINT_IMAGE.
build_image() {
  local path="$1" file
  file="$(toolchain_file "$path" "$PWD")"
  if [ -n "$file" ]; then
    ci_note "building the linter image from ${file#"$PWD"/} (Rust's distribution, signature checked)"
    pylint-sandbox image build --no-set-image --toolchain-file "$file" | tail -n 1
  else
    ci_note "building the linter image from this runner's stable rustup toolchain (no rust-toolchain.toml pins one)"
    pylint-sandbox image build --no-set-image --toolchain stable | tail -n 1
  fi
}

# image_key IMAGE PATH VERSION: what the image caches are keyed on: the reference a lint
# of PATH uses and the tool's version; for `build`, the toolchain file's bytes instead of
# a reference (the image is made from them and this runner's Debian archive). The file is
# the tree's: read only if it is a regular file and no link (a FIFO, or a link to
# /dev/zero, held `cat` for ever), and at most 64 KiB + 1 of it (the tool refuses more,
# and refuses the rest: image/toolchain_file.py).
image_key() {
  local image="$1" path="$2" version="$3" file
  if [ "$image" = build ]; then
    file="$(toolchain_file "$path" "$PWD")"
    {
      printf 'build\n%s\n' "$version"
      if [ -z "$file" ]; then
        printf 'stable\n'
      elif [ -f "$file" ] && [ ! -L "$file" ]; then
        head -c 65537 -- "$file"
      else
        printf 'refused\n'
      fi
    } | sha256sum | cut -c1-32
    return 0
  fi
  printf '%s\n%s\n' "$image" "$version" | sha256sum | cut -c1-32
}

# split_args TEXT: EXTRA_ARGS, TEXT split on whitespace (spaces, tabs, newlines). No
# quoting, globbing, variable or command expansion: each word is one argument as written.
# shellcheck disable=SC2034  # EXTRA_ARGS is read by the caller
split_args() {
  EXTRA_ARGS=()
  read -r -d '' -a EXTRA_ARGS <<<"${1:-}" || true
}

# prepare PATH: provision what a lint of PATH needs, then gate on doctor.
#
# doctor exits 3 when this host cannot lint PATH: no usable accelerator, the VM assets or
# the image missing, the configuration unreadable. It comes after the two prefetches
# because before them it would always say the assets and the image are missing; it comes
# before fetch-deps and the lint, so a runner without a usable hypervisor fails here with
# doctor's own checks in the log, not after minutes of downloads and a refused boot.
prepare() {
  local path="$1" status=0
  ci_note "provisioning the VM's kernel and initramfs"
  # --allow-download: no-op for --vm-assets since issue 23, kept for a `version` input
  # that installs an earlier release, which refuses without it.
  pylint-sandbox prefetch --vm-assets --allow-download
  ci_note "provisioning the linter image"
  pylint-sandbox prefetch --analyzer clippy --allow-download --path="$path"
  ci_note "can this runner lint ${path}?"
  pylint-sandbox doctor --path="$path" || status=$?
  if [ "$status" -ne 0 ]; then
    ci_error "this runner cannot lint: pylint-sandbox doctor exited $status (its checks marked MISS above say what is missing; a runner needs /dev/kvm, or accel: tcg to opt in to software emulation)"
    return "$status"
  fi
  ci_note "filling the package cache (runs none of the tree's code)"
  pylint-sandbox fetch-deps "$path"
}

# diff_name BASE: the file name of the pull request's diff, which the report and the
# summary show: what the diff is, `origin_BASE...HEAD.diff` (a branch name's `/` made
# `_`, as a file name cannot hold one), or `pull-request.diff` when that is longer than
# a file name may be. Never the temporary directory's random name.
diff_name() {
  local name="origin_${1//\//_}...HEAD.diff"
  if [ "${#name}" -gt 200 ]; then name=pull-request.diff; fi
  printf '%s' "$name"
}

# make_pr_diff BASE OUT: write to OUT the diff of HEAD against its merge base with the
# branch BASE of `origin`, as docs/ADOPTING.md gives it: git's defaults spelled out, so
# no user or repository configuration (colour, external diff tools, diff.relative,
# diff.noprefix, diff.mnemonicPrefix) changes its shape, and -M so a renamed file keeps
# its known findings. origin/BASE is fetched when the checkout lacks it (a CI checkout
# fetches only what it checks out), and a shallow checkout is deepened when the merge
# base is not in it. Runs git only: nothing of the tree is executed.
#
# Nor does the branch shape it: git in its checkout reads the branch's .gitattributes,
# where `*.rs -diff` turned every Rust change into "Binary files ... differ" and let a new
# warning pass as outside the diff. Attributes are read from the empty tree
# (--attr-source), none from the user's or the system's file, and no textconv or
# external driver runs. git before 2.40 (Debian bookworm's 2.39, the GitLab template's
# image) has no --attr-source: the diff is made without it, and a Rust file the branch
# hid in it is refused by the lint (compare/diff.py), never read as unchanged.
make_pr_diff() {
  local base="$1" out="$2"
  if ! git check-ref-format --branch "$base" >/dev/null 2>&1; then
    ci_error "the base branch name ${base@Q} is not a branch name git accepts"
    return 2
  fi
  local remote_ref="refs/remotes/origin/$base"
  if ! git rev-parse --verify --quiet "$remote_ref^{commit}" >/dev/null; then
    ci_note "fetching origin/$base, the pull request's base"
    git fetch --quiet --no-tags origin "+refs/heads/$base:$remote_ref"
  fi
  if ! git merge-base "$remote_ref" HEAD >/dev/null 2>&1 \
      && [ "$(git rev-parse --is-shallow-repository)" = true ]; then
    ci_note "the checkout is shallow and has no merge base with origin/$base: fetching its history (a full checkout avoids this: fetch-depth: 0, GIT_DEPTH: 0)"
    git fetch --quiet --no-tags --unshallow origin "+refs/heads/$base:$remote_ref"
  fi
  local empty attr_source=()
  empty="$(git hash-object -t tree /dev/null)"
  if git "--attr-source=$empty" version >/dev/null 2>&1; then
    attr_source=("--attr-source=$empty")
  else
    ci_note "$(git version) has no --attr-source (git 2.40): the diff is made with the branch's .gitattributes in force, and a Rust file they hide in it is refused by the lint"
  fi
  GIT_ATTR_NOSYSTEM=1 git ${attr_source[@]+"${attr_source[@]}"} -c core.attributesFile=/dev/null \
    diff --no-color --no-ext-diff --no-textconv --no-relative --src-prefix=a/ --dst-prefix=b/ -M \
    "origin/$base...HEAD" >"$out"
}

# The dependency caches across a CI cache. Each is a sparse file as large as the scratch
# disk (8 GiB by default) holding ~110 MB, and both CI caches write holes out: actions/cache
# archives with GNU tar without --sparse (actions/toolkit, packages/cache/src/internal/tar.ts),
# GitLab's runner with zip. So the CI caches hold one archive of the directory made by GNU
# `tar --sparse` (holes recorded, never written), and GNU tar restores the holes when it
# extracts it. The pack is bytes only: tar finds the holes with SEEK_DATA/SEEK_HOLE and
# copies the rest; no program of ours or the host's reads the ext4 inside, which the guest's
# kernel wrote (SANDBOXED_LINTING.md, "The dependency cache"). What the archive restores is
# checked like any local cache, against each cache's sealed record, when a lint uses it.
DEPS_ARCHIVE=deps.tar

# pack_deps DEPS OUT: OUT/deps.tar, the directory DEPS archived with its holes kept (OUT
# emptied first). Nothing is written when DEPS is not a directory (no cache was kept: the
# save step then has nothing to save, as before). A pack that fails (a full disk) says so
# and leaves nothing to save, with status 0: the caches are an optimisation, and a failed
# step would skip the steps after it (the SARIF upload, the job's verdict).
pack_deps() {
  local deps="$1" out="$2" began=$SECONDS
  rm -rf -- "$out"
  if [ ! -d "$deps" ] || [ -L "$deps" ]; then
    ci_note "no dependency caches to pack (${deps} is not a directory)"
    return 0
  fi
  if ! mkdir -p -- "$out" \
      || ! tar --create --sparse --format=gnu --file="$out/$DEPS_ARCHIVE" --directory="$deps" .; then
    ci_error "the dependency caches could not be packed (said above): none is saved, and the next job builds them again"
    rm -rf -- "$out" || true
    return 0
  fi
  ci_note "packed the dependency caches: $(du -s --apparent-size -B1 -- "$deps" | cut -f1) bytes ($(du -s -B1 -- "$deps" | cut -f1) on disk) in a $(stat -c %s -- "$out/$DEPS_ARCHIVE")-byte archive, $((SECONDS - began)) s"
}

# unpack_deps FROM DEPS: FROM/deps.tar extracted into DEPS with its holes, then FROM
# removed (the archive's bytes are on disk once, and never in a tree a lint copies). No
# archive (nothing restored), or a link where it should be: nothing is extracted. DEPS
# already there (a runner that keeps its state, as a self-hosted one): that one is
# current, and the archive is only removed. An archive tar cannot read leaves no caches
# (a lint then builds its own), never a half-extracted directory.
unpack_deps() {
  local from="$1" deps="$2" began=$SECONDS
  local archive="$from/$DEPS_ARCHIVE"
  if [ -L "$from" ] || [ ! -f "$archive" ] || [ -L "$archive" ]; then
    rm -rf -- "$from"
    return 0
  fi
  if [ -e "$deps" ] || [ -L "$deps" ]; then
    ci_note "keeping this runner's own dependency caches in ${deps}; the restored archive is not unpacked"
    rm -rf -- "$from"
    return 0
  fi
  mkdir -p -- "$deps"
  if ! tar --extract --no-same-owner --file="$archive" --directory="$deps"; then
    ci_error "the restored dependency caches could not be unpacked (tar said why above): a lint builds its own"
    rm -rf -- "$deps" "$from"
    return 0
  fi
  rm -rf -- "$from"
  ci_note "unpacked the dependency caches: $(du -s --apparent-size -B1 -- "$deps" | cut -f1) bytes ($(du -s -B1 -- "$deps" | cut -f1) on disk), $((SECONDS - began)) s"
}
