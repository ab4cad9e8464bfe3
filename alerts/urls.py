from django.urls import path

from alerts import views

app_name = "alerts"
urlpatterns = [
    path("", views.alerts, name="alerts"),
    path("create/", views.alert_create, name="create"),
    *[
        path(f"<str:alert_id>/{action}/", views.alert_action, {"action": action}, name=action)
        for action in views.ACTIONS
    ],
    path("deliveries/<str:delivery_id>/redeliver/", views.delivery_redeliver, name="redeliver"),
]
