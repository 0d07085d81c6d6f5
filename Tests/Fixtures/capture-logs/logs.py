# Drives the official Sensors Python SDK (SensorsAnalyticsSDK from PyPI), unmodified, through
# LoggingConsumer: the file it writes is what `datongctl import` ships. Run by
# Tests/Fixtures/capture-logs.sh: python3 logs.py FILE
import datetime
import sys

import sensorsanalytics


def at(minute):
    return datetime.datetime(2026, 11, 20, 8, minute, 15, tzinfo=datetime.timezone.utc)


sa = sensorsanalytics.SensorsAnalytics(sensorsanalytics.LoggingConsumer(sys.argv[1]))
sa.track('py-log-anon', 'ViewProduct', {'$time': at(1), 'sku': 'a-1', 'price': 9.9, 'title': '中文标题'}, is_login_id=False)
sa.track_signup('py-log-user', 'py-log-anon')
for i in range(3):
    sa.track('py-log-user', 'BuyProduct', {'$time': at(2 + i), 'n': i, 'tags': ['x', 'y']}, is_login_id=True)
sa.profile_set('py-log-user', {'name': 'Python Log'}, is_login_id=True)
sa.profile_increment('py-log-user', {'orders': 3}, is_login_id=True)
sa.item_set('book', 'py-log-isbn', {'title': 'Logs'})
sa.close()
