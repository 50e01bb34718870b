#!/bin/sh
# A file-exchange agent in plain POSIX shell: tether hands it tasks as files, it answers with
# files. Any language works the same way; this one upper-cases each message.
#
#   tether worker run --store postgresql://tether@db/tether --exchange /srv/exchange &
#   sh answer.sh /srv/exchange
#
# Format (docs/pool.md, "File exchange"): tether writes DIR/outbox/<id>.txt as header lines
# "key: value" (task, priority, room, header.<key>), a blank line, then the message body.
# The answer is DIR/results/<id>.txt: the line "task: <id>", optional headers
# ("no-send: true" stores the task as done without posting a reply), a blank line, the reply.
# A task of a room also gets DIR/outbox/<id>.conversation.json beside it, written first: the
# room's history, state and version (docs/guide/conversations.md); writing
# DIR/results/<id>.state.json (a JSON object) before the result stores a new state with it.
# This program keeps no state. Write it under another name in results/ and rename it: a rename is atomic, so tether never
# reads half an answer, and a program killed mid-write leaves only a stray temporary file
# (rewritten on the next try). Tether archives both files once the reply is stored.
#
# Durable steps (run_of(task).step) are not offered through the exchange: this program holds
# no lease to fence a record with, so a crash runs its whole answer again. A program that needs
# steps keeps its own record keyed by the task id and step name (docs: durable runs).
#
# SLOW=seconds (optional) pauses between the header and the body: it simulates a slow program
# (the tests kill it mid-write this way).
dir=${1:?usage: answer.sh EXCHANGE_DIR}
slow=${SLOW:-0}
while :; do
  for task in "$dir"/outbox/*.txt; do
    [ -e "$task" ] || continue                  # no task: the glob matched nothing
    name=${task##*/}
    id=${name%.txt}
    [ -e "$dir/results/$name" ] && continue     # answered; tether archives it soon
    # the message: every line after the first blank one (the x keeps its trailing
    # newlines, which $(...) would strip; printf '%s' then writes it back exactly)
    body=$(sed '1,/^$/d' "$task" 2>/dev/null && printf x) || continue
    body=${body%x}
    tmp="$dir/results/.$name.tmp"               # a dot name: not a result until renamed
    printf 'task: %s\n\n' "$id" > "$tmp" || continue
    [ "$slow" = 0 ] || sleep "$slow"
    printf '%s' "$body" | tr 'a-z' 'A-Z' >> "$tmp" && mv -f "$tmp" "$dir/results/$name"
  done
  sleep 0.05
done
