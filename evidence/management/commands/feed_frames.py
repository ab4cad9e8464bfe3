"""One tick of the frame feed (what the Celery beat schedule runs every 20 seconds)."""

import json
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from evidence.live import frames


class Command(BaseCommand):
    help = "Replay the next minutes (when LEROY_FRAME_FEED=replay) and recompute every current frame."

    def handle(self, *args: Any, **options: Any) -> None:
        if settings.LEROY_FRAME_FEED == "replay":
            fed = frames.replay_tick()
        else:
            fed = frames.provider_tick() if settings.LEROY_MARKET_DATA_TOKEN else 0
        refreshed = frames.frames_refresh()
        self.stdout.write(json.dumps({"feed": settings.LEROY_FRAME_FEED, "bars_fed": fed, "frames_changed": refreshed}))
