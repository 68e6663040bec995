"""Writing to the log: the case writers and the trigger sender.

Sequence numbers, fencing, one transaction per append; the transactional producer; one-record writes.
"""
