"""Size limits of the wire: what a worker accepts before it refuses a record as oversize."""

MAX_TRIGGER_BYTES = 1_048_576
# The default of DPM_MAX_CASE_CHARS: a case longer than its model's window is projected in segments
# (core/segments.py), so this bounds what one worker holds in memory, not what one call reads.
MAX_TRAJECTORY_CHARS = 50_000_000
MAX_DEAD_LETTER_DETAIL_CHARS = 2_000
# A dead letter always fits in a record: the refused bytes are kept whole up to these sizes, and
# beyond them cut, with their full size and SHA-256 (the original stays on its source topic,
# whose position the dead letter names). Base64 makes 256 KiB about 350 KB.
MAX_DEAD_LETTER_VALUE_BYTES = 256 * 1024
MAX_DEAD_LETTER_KEY_BYTES = 4 * 1024
# The dead letter's own Kafka key is the original key up to this size, else its digest.
MAX_DEAD_LETTER_RECORD_KEY_BYTES = 1024
