"""The strategy the demo saves for its account: the strategy documentation's SmaCross, as an agent would author it
(tests/backtests/test_examples.py holds the two copies equal)."""

DEMO_STRATEGY_NAME = "Demo SMA cross"

SMA_CROSS = """class SmaCross(bt.Strategy):
    params = (("fast", 10), ("slow", 30), ("size", 10))

    def __init__(self):
        fast = bt.ind.SMA(self.data.close, period=self.p.fast)
        slow = bt.ind.SMA(self.data.close, period=self.p.slow)
        self.cross = bt.ind.CrossOver(fast, slow)

    def next(self):
        if not self.position and self.cross[0] > 0:
            self.buy(size=self.p.size)
        elif self.position and self.cross[0] < 0:
            self.close()
"""
