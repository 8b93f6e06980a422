#!/bin/sh
# One-shot: register Groundwork's Keyword search attributes in a Temporal namespace.
# Safe to run again: an attribute that already exists as Keyword counts as done.
# Env: TEMPORAL_ADDRESS (host:port), NAMESPACE, SETUP_ATTEMPTS, SETUP_SLEEP_SECONDS.
set -eu

: "${TEMPORAL_ADDRESS:=temporal:7233}"
: "${NAMESPACE:=default}"
: "${SETUP_ATTEMPTS:=60}"
: "${SETUP_SLEEP_SECONDS:=2}"
ATTRIBUTES="GwStatus GwAgent GwTenant GwRelease GwWaitingReason"

cli() { temporal "$@" --address "$TEMPORAL_ADDRESS"; }

attempt=1
until cli operator namespace describe --namespace "$NAMESPACE" >/dev/null 2>&1; do
    if [ "$attempt" -ge "$SETUP_ATTEMPTS" ]; then
        echo "namespace $NAMESPACE not reachable at $TEMPORAL_ADDRESS after $attempt attempts" >&2
        exit 1
    fi
    echo "waiting for namespace $NAMESPACE at $TEMPORAL_ADDRESS ($attempt/$SETUP_ATTEMPTS)"
    attempt=$((attempt + 1))
    sleep "$SETUP_SLEEP_SECONDS"
done

for name in $ATTRIBUTES; do
    attempt=1
    while :; do
        if out=$(cli operator search-attribute create --namespace "$NAMESPACE" \
            --name "$name" --type Keyword 2>&1); then
            echo "created $name (Keyword)"
            break
        fi
        case "$out" in
            *"already exists"* | *"already registered"*)
                echo "$name already exists"
                break
                ;;
        esac
        if [ "$attempt" -ge "$SETUP_ATTEMPTS" ]; then
            echo "could not create search attribute $name: $out" >&2
            exit 1
        fi
        echo "retrying $name ($attempt/$SETUP_ATTEMPTS): $out"
        attempt=$((attempt + 1))
        sleep "$SETUP_SLEEP_SECONDS"
    done
done

# A same-named attribute of another type also reports "already exists", so check the types.
# The listing can lag a create by a cache refresh; wait for it.
attempt=1
while :; do
    listing=$(cli operator search-attribute list --namespace "$NAMESPACE") || listing=""
    missing=""
    for name in $ATTRIBUTES; do
        type=$(printf '%s\n' "$listing" | awk -v n="$name" '$1 == n { print $2 }')
        case "$type" in
            Keyword) ;;
            "") missing="$missing $name" ;;
            *)
                echo "search attribute $name exists in namespace $NAMESPACE as $type, not Keyword" >&2
                exit 1
                ;;
        esac
    done
    if [ -z "$missing" ]; then
        echo "search attributes ready in namespace $NAMESPACE: $ATTRIBUTES"
        exit 0
    fi
    if [ "$attempt" -ge "$SETUP_ATTEMPTS" ]; then
        echo "not listed in namespace $NAMESPACE:$missing" >&2
        exit 1
    fi
    echo "waiting for search attributes to be listed:$missing ($attempt/$SETUP_ATTEMPTS)"
    attempt=$((attempt + 1))
    sleep "$SETUP_SLEEP_SECONDS"
done
