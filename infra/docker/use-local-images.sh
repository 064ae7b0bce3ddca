#!/usr/bin/env bash
# After `make images`: every later `docker compose ...` in this checkout runs the local images
# with no -f flags. Compose reads COMPOSE_FILE from the project's .env (untracked), so this
# sets that one line there and keeps every other line a user wrote. Where no .env sets it,
# plain `docker compose up` uses the official images (a machine that reaches a registry).
#   use-local-images.sh          write the line
#   use-local-images.sh --off    remove it (back to the official images)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ENV_FILE="$ROOT/.env"
MARK="# Written by make images (infra/docker/use-local-images.sh --off removes it): compose runs the images built here."
LINE="COMPOSE_FILE=docker-compose.yml:infra/docker/compose.local-images.yml"

# A new file beside .env, then one rename: an interrupted run leaves the old .env whole.
next="$(mktemp "$ROOT/.env.XXXXXX")"
trap 'rm -f "$next"' EXIT
if [ -f "$ENV_FILE" ]; then
    grep -v -x -F -e "$MARK" "$ENV_FILE" | grep -v '^COMPOSE_FILE=' >"$next" || true
fi
if [ "${1:-}" != "--off" ]; then
    printf '%s\n%s\n' "$MARK" "$LINE" >>"$next"
fi
chmod 600 "$next"  # .env may hold a user's secrets (.env.example)
mv -f "$next" "$ENV_FILE"
trap - EXIT
if [ "${1:-}" = "--off" ]; then
    echo "[images] .env: COMPOSE_FILE removed: docker compose uses the official images again" >&2
else
    echo "[images] .env: $LINE: plain \`docker compose ...\` now runs the images built here" >&2
fi
