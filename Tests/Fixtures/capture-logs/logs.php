<?php
// Drives the official Sensors PHP SDK, unmodified, through FileConsumer: the file it writes is what
// `datongctl import` ships. Run by Tests/Fixtures/capture-logs.sh: php logs.php SDK_DIR FILE
require $argv[1] . '/SensorsAnalytics.php';
$sa = new SensorsAnalytics(new FileConsumer($argv[2]));
$at = function ($minute) { return gmmktime(8, $minute, 15, 11, 20, 2026) * 1000; };
$sa->track('php-log-anon', false, 'ViewProduct', array('$time' => $at(1), 'sku' => 'a-1', 'price' => 9.9, 'title' => '中文标题'));
$sa->track_signup('php-log-user', 'php-log-anon');
for ($i = 0; $i < 3; $i++) {
    $sa->track('php-log-user', true, 'BuyProduct', array('$time' => $at(2 + $i), 'n' => $i, 'tags' => array('x', 'y')));
}
$sa->profile_set('php-log-user', true, array('name' => 'PHP Log'));
$sa->profile_increment('php-log-user', true, array('orders' => 3));
$sa->item_set('book', 'php-log-isbn', array('title' => 'Logs'));
$sa->close();
