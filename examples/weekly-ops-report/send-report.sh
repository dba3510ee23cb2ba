#!/bin/sh
# The job: render once, validate, send once, keep the Message-ID.
set -eu
here=$(cd "$(dirname "$0")" && pwd)

report=$(retrysafe generate render --output report.md \
  --validate "python3 $here/validate_report.py" -- python3 "$here/render_report.py")
week=$(head -n 1 "$report" | sed 's/^# Weekly ops report //')

# the connector gives the message a Message-ID derived from the step key and
# files a copy in Sent before sending, so a retry finds it instead of resending
message_id=$(retrysafe step send --connector mail --with to=alice@example.test \
  --with subject="Weekly ops report $week" --with body_file="$report")
echo "$message_id" > "$RETRYSAFE_ATTEMPT_DIR/message-id.txt"
