#!/usr/bin/env bash
# An outside program as a tether worker, in plain shell, through the file exchange.
#
# tether's side (Python, one line):  file_exchange_worker(store, "shell", ROOT)
# This side: wait for ROOT/outbox/<id>.txt, answer in ROOT/results/<id>.txt.
#
# A task file:   "key: value" header lines (the first is "task: <id>"), a blank line, the body.
# A result file: first line "task: <id>" (the same id), optional headers ("no-send: true"),
#                a blank line, the reply. Written under a temporary name, then renamed, so
#                tether never reads half a file. Custody stays in tether's store: the task
#                file is archived only after the result is durably stored, and a task this
#                program never answers is retried elsewhere once its lease runs out.
#
# The "agent" here counts the words of the body and shouts it back; replace answer() with
# your program (a model CLI, a script in another language, ...).
#
# Usage: file_worker.sh ROOT      stops on SIGTERM/SIGINT, or when ROOT/stop exists.
set -euo pipefail

root="${1:?usage: file_worker.sh ROOT}"
outbox="$root/outbox"
results="$root/results"
umask 077                        # results are private, like everything tether writes
mkdir -p "$outbox" "$results"

trap 'exit 0' TERM INT

answer() {  # stdin: the task's body; stdout: the reply
    local body words
    body="$(cat && printf x)"
    body="${body%x}"
    words=$(printf '%s' "$body" | wc -w)
    printf '%s words: ' "$words"
    printf '%s' "$body" | tr '[:lower:]' '[:upper:]'
}

while [ ! -e "$root/stop" ]; do
    for task_file in "$outbox"/*.txt; do
        [ -e "$task_file" ] || continue              # the glob matched nothing
        id="$(basename "$task_file" .txt)"
        [ -e "$results/$id.txt" ] && continue        # answered; tether archives it soon
        # read the file once; it may be archived meanwhile (its result was stored): skip it
        task="$(cat "$task_file" 2>/dev/null && printf x)" || continue
        task="${task%x}"                             # (the x keeps trailing newlines)
        if [ "${task%%$'\n'*}" != "task: $id" ]; then
            echo "file_worker: $task_file does not start with 'task: $id'; skipped" >&2
            continue
        fi
        body="${task#*$'\n\n'}"                      # everything after the first blank line
        tmp="$results/.$id.tmp"
        {
            printf 'task: %s\n\n' "$id"
            printf '%s' "$body" | answer
        } > "$tmp"
        mv "$tmp" "$results/$id.txt"                 # atomic: tether sees all of it or nothing
    done
    sleep 0.1
done
