"""Market data: symbols and bars, the bar store, the XNYS calendar, importers and validation, providers.

The bottom floor of evidence: it imports nothing of Market Memory, the live feed, research or backtests, and both
evidence and backtests read bars through it.
"""
