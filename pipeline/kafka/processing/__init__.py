"""The workers' exactly-once consume-transform-produce loop.

Transactions, the published ledger, steps, segment views, lag.
"""
