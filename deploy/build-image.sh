#!/usr/bin/env bash
# Builds the Crest container image offline: static binaries first, then a FROM scratch image.
#
#   deploy/build-image.sh                 # -> crest:latest and crest:<version>
#   IMAGE=registry.example/crest deploy/build-image.sh
#
# Steps: `cargo build --release` of `crest` and `crest-worker` linked statically against glibc
# (RUSTFLAGS=-C target-feature=+crt-static, --target x86_64-unknown-linux-gnu) into its own
# target dir (target/static, so the normal target/ is left alone); strip the copies; assemble
# a small build context in target/static/image/; `docker build -f deploy/Dockerfile`. Nothing
# is pulled: the image starts FROM scratch. Prints the image size at the end.
#
# Environment: IMAGE (default crest), CARGO_TARGET_DIR (default target/static),
# SKIP_CARGO=1 to reuse binaries already built there, CREST_BIN_DIR=DIR to take static
# `crest` and `crest-worker` already built elsewhere (scripts/test.sh passes its own static
# test build, so CI compiles the workspace once).
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE="${IMAGE:-crest}"
TRIPLE=x86_64-unknown-linux-gnu
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target/static}"
BIN_DIR="${CREST_BIN_DIR:-$CARGO_TARGET_DIR/$TRIPLE/release}"
CTX="$CARGO_TARGET_DIR/image"

if [[ "${SKIP_CARGO:-0}" != 1 && -z "${CREST_BIN_DIR:-}" ]]; then
    echo "build-image: compiling static binaries into $BIN_DIR" >&2
    # --target keeps RUSTFLAGS away from build scripts and proc macros (they stay dynamic).
    RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
        cargo build --release --locked --target "$TRIPLE" -p crest -p crest-engine --bins
fi
for b in crest crest-worker; do
    [[ -x "$BIN_DIR/$b" ]] || { echo "build-image: $BIN_DIR/$b is missing; run without SKIP_CARGO=1 or CREST_BIN_DIR" >&2; exit 1; }
    # A binary that needs a dynamic loader would not start in an empty root file system.
    if ! file -b "$BIN_DIR/$b" 2>/dev/null | grep -q 'static'; then
        if command -v file >/dev/null; then
            echo "build-image: $BIN_DIR/$b is not statically linked" >&2; exit 1
        fi
    fi
done

rm -rf "$CTX"
mkdir -p "$CTX/bin" "$CTX/rootfs" "$CTX/results" "$CTX/share"
cp -a deploy/rootfs/. "$CTX/rootfs/"
install -d -m 1777 "$CTX/rootfs/tmp"
for b in crest crest-worker; do
    # Debug info stays in target/static for symbolizing; the image gets the stripped copy.
    strip -o "$CTX/bin/$b" "$BIN_DIR/$b" 2>/dev/null || cp "$BIN_DIR/$b" "$CTX/bin/$b"
    chmod 0755 "$CTX/bin/$b"
done

# Shell completions and man pages, made by the binary itself (so they list what parses).
mkdir -p "$CTX/share/bash-completion/completions" "$CTX/share/zsh/site-functions" \
    "$CTX/share/fish/vendor_completions.d" "$CTX/share/man/man1"
"$CTX/bin/crest" completions bash > "$CTX/share/bash-completion/completions/crest"
"$CTX/bin/crest" completions zsh > "$CTX/share/zsh/site-functions/_crest"
"$CTX/bin/crest" completions fish > "$CTX/share/fish/vendor_completions.d/crest.fish"
"$CTX/bin/crest" man > "$CTX/share/man/man1/crest.1"
for sub in run compare suite search relay report sink completions man; do
    "$CTX/bin/crest" man "$sub" > "$CTX/share/man/man1/crest-$sub.1"
done
for f in "$CTX/share/bash-completion/completions/crest" "$CTX/share/man/man1/crest.1"; do
    [[ -s "$f" ]] || { echo "build-image: $f is empty" >&2; exit 1; }
done

VERSION="$("$CTX/bin/crest" --version | awk '{print $2}')"
[[ -n "$VERSION" ]] || { echo "build-image: cannot read the version from crest --version" >&2; exit 1; }

echo "build-image: docker build $IMAGE:$VERSION (context $CTX)" >&2
OLD_ID="$(docker image inspect -f '{{.Id}}' "$IMAGE:$VERSION" 2>/dev/null || true)"
# The legacy builder needs nothing from a registry for FROM scratch; BuildKit would too, but
# it is not installed everywhere.
# (Its "legacy builder is deprecated" notice is shown only when the build fails.)
if ! DOCKER_BUILDKIT="${DOCKER_BUILDKIT:-0}" docker build --quiet \
    -f deploy/Dockerfile --build-arg VERSION="$VERSION" \
    -t "$IMAGE:$VERSION" -t "$IMAGE:latest" "$CTX" >"$CTX.log" 2>&1; then
    cat "$CTX.log" >&2
    echo "build-image: docker build failed" >&2
    exit 1
fi

# The image this build replaced, now untagged, is removed (not any other dangling image).
NEW_ID="$(docker image inspect -f '{{.Id}}' "$IMAGE:$VERSION")"
if [[ -n "$OLD_ID" && "$OLD_ID" != "$NEW_ID" && -z "$(docker image inspect -f '{{join .RepoTags ""}}' "$OLD_ID" 2>/dev/null)" ]]; then
    docker rmi "$OLD_ID" >/dev/null 2>&1 || true
fi
SIZE="$(docker image inspect -f '{{.Size}}' "$IMAGE:$VERSION")"
echo "build-image: built $IMAGE:$VERSION and $IMAGE:latest, $SIZE bytes ($(awk -v b="$SIZE" 'BEGIN{printf "%.1f", b/1048576}') MiB)"
