"""Stop-sequence detection: a first, slow version that scans position by position."""

# EVOLVE-BLOCK-START
def first_stop(text, stops):
    for end in range(1, len(text) + 1):
        for stop in stops:
            if stop and text.endswith(stop, 0, end):
                return end
    return -1
# EVOLVE-BLOCK-END
