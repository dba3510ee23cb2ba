#!/bin/sh
# The job itself: every step goes through retrysafe, which hands each effect
# its step key and looks before acting again after a crash.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
dir=$RETRYSAFE_ATTEMPT_DIR

# 1. the draft: generated once, frozen; a retry gets the same file back
draft=$(retrysafe generate draft --output draft.md -- python3 "$here/write_draft.py")
title=$(head -n 1 "$draft" | sed 's/^# //')

# 2. publish it to the CMS (the post carries the step key as Idempotency-Key)
# (written under a temporary name and renamed: a kill never leaves half a file)
python3 "$here/payload.py" post "$draft" > "$dir/post.json.tmp" && mv "$dir/post.json.tmp" "$dir/post.json"
post=$(retrysafe step publish --connector cms --payload "$dir/post.json")

# 3. a row in the sheet (the row carries the step key in its key column)
retrysafe step sheet-row --connector sheet \
  --with occurrence="${RETRYSAFE_OUTCOME_KEY#*:}" --with title="$title" --with post="$post" >/dev/null

# 4. tell the team (the message carries the step key too)
python3 "$here/payload.py" chat "$draft" "$post" > "$dir/chat.json.tmp" && mv "$dir/chat.json.tmp" "$dir/chat.json"
retrysafe step notify --connector chat --payload "$dir/chat.json" >/dev/null
