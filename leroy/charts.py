"""Charts as plain SVG geometry for the templates: rendered on the server, no script, no inline style, no CDN.

Each chart keeps its inputs next to the coordinates (`Point.value`), so a page test can check that what is
drawn is exactly the data. Ground floor: imports no app.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field

WIDTH, HEIGHT, PAD = 640.0, 220.0, 36.0


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    value: float
    label: str


@dataclass(frozen=True)
class LineChart:
    points: list[Point]
    low: float
    high: float
    width: float = WIDTH
    height: float = HEIGHT
    pad: float = PAD

    @property
    def polyline(self) -> str:
        return " ".join(f"{p.x:.2f},{p.y:.2f}" for p in self.points)

    @property
    def area(self) -> str:
        """The polyline closed down to the baseline (for drawdown, the zero line at the top)."""
        if not self.points:
            return ""
        base = self.y_of(0.0) if self.low <= 0.0 <= self.high else self.height - self.pad
        return f"{self.points[0].x:.2f},{base:.2f} {self.polyline} {self.points[-1].x:.2f},{base:.2f}"

    @property
    def first_label(self) -> str:
        return self.points[0].label if self.points else ""

    @property
    def last_label(self) -> str:
        return self.points[-1].label if self.points else ""

    def y_of(self, value: float) -> float:
        span = (self.high - self.low) or 1.0
        return self.pad + (self.high - value) / span * (self.height - 2 * self.pad)


def line_chart(series: Sequence[tuple[str, float]]) -> LineChart:
    """(label, value) pairs, left to right, scaled into the plot area."""
    values = [float(value) for _, value in series]
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    if low == high:
        low, high = low - 1.0, high + 1.0
    chart = LineChart(points=[], low=low, high=high)
    step = (WIDTH - 2 * PAD) / max(len(values) - 1, 1)
    chart.points.extend(
        Point(x=PAD + i * step, y=chart.y_of(value), value=value, label=label)
        for i, ((label, _), value) in enumerate(zip(series, values, strict=True))
    )
    return chart


def drawdown(series: Sequence[tuple[str, float]]) -> list[tuple[str, float]]:
    """Percentage below the running peak at each point (0 at a new high, negative below it)."""
    peak = float("-inf")
    out = []
    for label, value in series:
        peak = max(peak, value)
        out.append((label, (value / peak - 1.0) * 100.0 if peak > 0 else 0.0))
    return out


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    value: int
    label: str


@dataclass(frozen=True)
class BarChart:
    bars: list[Bar]
    high: int
    width: float = WIDTH
    height: float = HEIGHT
    pad: float = PAD
    baseline: float = field(default=HEIGHT - PAD)


def bar_chart(series: Sequence[tuple[str, int]]) -> BarChart:
    high = max([value for _, value in series] + [1])
    slot = (WIDTH - 2 * PAD) / max(len(series), 1)
    plot = HEIGHT - 2 * PAD
    bars = []
    for i, (label, value) in enumerate(series):
        h = value / high * plot
        bars.append(
            Bar(x=PAD + i * slot + slot * 0.1, y=HEIGHT - PAD - h, width=slot * 0.8, height=h, value=value, label=label)
        )
    return BarChart(bars=bars, high=high)


@dataclass(frozen=True)
class Cell:
    x: float
    y: float
    size_x: float
    size_y: float
    value: float | None
    shade: int  # 0..4, the template maps it to a fill class
    column: str
    row: str


@dataclass(frozen=True)
class HeatMap:
    cells: list[Cell]
    columns: list[str]
    rows: list[str]
    column_name: str
    row_name: str
    low: float | None
    high: float | None
    width: float = WIDTH
    height: float = HEIGHT + 80


def heat_map(
    values: dict[tuple[str, str], float | None], *, columns: list[str], rows: list[str], column_name: str, row_name: str
) -> HeatMap:
    """A grid of (column, row) → value; shade 0 is the lowest value, 4 the highest, None is unshaded."""
    known = [v for v in values.values() if v is not None]
    low, high = (min(known), max(known)) if known else (None, None)
    left, top = 90.0, 20.0
    size_x = (WIDTH - left - 10) / max(len(columns), 1)
    size_y = (HEIGHT + 80 - top - 40) / max(len(rows), 1)
    cells = []
    for r, row in enumerate(rows):
        for c, column in enumerate(columns):
            value = values.get((column, row))
            if value is None or low is None or high is None:
                shade = -1
            else:
                shade = 2 if high == low else min(4, int((value - low) / (high - low) * 5))
            cells.append(Cell(left + c * size_x, top + r * size_y, size_x, size_y, value, shade, column, row))
    return HeatMap(cells, columns, rows, column_name, row_name, low, high)
