# What Tests/Fixtures/capture-ruby.sh runs against capture.py with the official Ruby SDK, unmodified.
#   ruby -I SDK/lib capture.rb http://127.0.0.1:PORT
# The SDK uses StringIO without requiring it (an application, Rails say, has loaded it).
require 'stringio'
require 'sensors_analytics_sdk'

server = ARGV.fetch(0)
url = "#{server}/sa?project=default"

# DefaultConsumer: one request a record. Date-times of 600 ms, 60 ms, 4 ms and whole seconds: the
# SDK writes the millisecond count unpadded after the point (`05.600`, `05.60`, `05.4`, `05.0`).
sa = SensorsAnalytics::SensorsAnalytics.new(SensorsAnalytics::DefaultConsumer.new(url))
t0 = Time.at(1795273119, in: '+08:00')
sa.track('ruby-device-1', 'Times', {
  'ms600' => t0 + 0.6, 'ms60' => t0 + 0.06, 'ms4' => t0 + 0.004, 'ms0' => t0,
  '$time' => t0 + 0.6,
})

# The documented sign-up of a server SDK without `$is_login_id`: the login id is the first
# argument, the anonymous id the second; then the login id's own events and profile.
sa.track('ruby-device-2', 'BrowseBeforeSignup', { 'page' => 'home' })
sa.track_signup('ruby-login-2', 'ruby-device-2', { 'channel' => 'ruby' })
sa.track('ruby-login-2', 'BuyAfterSignup', { 'price' => 12.5 })
sa.profile_set('ruby-login-2', { 'name' => 'Bob' })

# BatchConsumer: one data_list of three records.
batch_consumer = SensorsAnalytics::BatchConsumer.new(url, 3)
batch = SensorsAnalytics::SensorsAnalytics.new(batch_consumer)
batch.track('ruby-login-2', 'Batched', { 'n' => 1 })
batch.profile_increment('ruby-login-2', { 'orders' => 1 })
batch.item_set('book', 'ruby-item-1', { 'title' => 'Datong' })
batch_consumer.flush
