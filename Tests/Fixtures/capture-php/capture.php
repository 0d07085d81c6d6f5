<?php
// What Tests/Fixtures/capture-php.sh runs against capture.py with the official PHP SDK, unmodified.
//   php capture.php SDK_DIR http://127.0.0.1:PORT
require $argv[1] . '/SensorsAnalytics.php';
$url = $argv[2] . '/sa?project=default';

// BatchConsumer: one request of three records, then one per flush.
$consumer = new BatchConsumer($url, 3, 5000);
$sa = new SensorsAnalytics($consumer);

// Before and after a sign-up, with the SDK's own login flag ($is_login_id); a date-time as the
// manual writes it and as a DateTime (which the SDK passes to json_encode as an object), a list,
// a number.
$sa->track('php-device-1', false, 'BrowseBeforeSignup', array('page' => 'home', 'tags' => array('a', 'b'), 'price' => 12.5));
$sa->track_signup('php-login-1', 'php-device-1', array('channel' => 'php'));
$sa->track('php-login-1', true, 'BuyAfterSignup', array(
    'price' => 9.9, 'paid_at' => '2026-11-20 08:30:15.123',
    'shipped_at' => new DateTime('2026-11-21 09:10:11.456789', new DateTimeZone('Asia/Shanghai'))));
$sa->flush();

// Profile operations of the logged-in user, and an item.
$sa->profile_set('php-login-1', true, array('name' => 'Ann'));
$sa->profile_increment('php-login-1', true, array('orders' => 2));
$sa->profile_append('php-login-1', true, array('labels' => array('vip')));
$sa->item_set('book', 'php-item-1', array('title' => 'Datong'));
$sa->flush();

// IDM 3: bind a mobile to the login id, an event by identity, then unbind the mobile.
$sa->bind(new SensorsAnalyticsIdentity(array('$identity_login_id' => 'php-login-1')),
          new SensorsAnalyticsIdentity(array('$identity_mobile' => '13800000001')));
$sa->track_by_id(new SensorsAnalyticsIdentity(array('$identity_mobile' => '13800000001')), 'ByMobile', array('n' => 1));
$sa->unbind(new SensorsAnalyticsIdentity(array('$identity_mobile' => '13800000001')));
$sa->flush();
$sa->close();
