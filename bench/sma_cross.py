"""The SMA-cross strategy both backtest benchmarks run (as agent-authored source)."""

SMA_CROSS = """
class SmaCross(bt.Strategy):
    params = (("fast", 10), ("slow", 30))

    def __init__(self):
        self.cross = bt.ind.CrossOver(bt.ind.SMA(self.data.close, period=self.p.fast),
                                      bt.ind.SMA(self.data.close, period=self.p.slow))

    def next(self):
        if not self.position and self.cross[0] > 0:
            self.buy(size=100)
        elif self.position and self.cross[0] < 0:
            self.close()
"""
