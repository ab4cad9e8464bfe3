from django.urls import path

from backtests import pages

app_name = "backtests"
urlpatterns = [
    path("strategies/", pages.strategies, name="strategies"),
    path("strategies/<str:strategy_id>/", pages.strategy, name="strategy"),
    path("reports/<str:report_id>/", pages.report, name="report"),
    path("optimizations/<str:optimization_id>/", pages.optimization, name="optimization"),
]
