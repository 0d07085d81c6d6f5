// What Tests/Fixtures/capture-cpp.sh builds with the official C++ SDK, unmodified, and runs
// against capture.py:   capture STAGING_FILE http://127.0.0.1:PORT
#include <ctime>
#include <string>
#include <vector>
#include "sensors_analytics_sdk.h"

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  const std::string url = std::string(argv[2]) + "/sa?project=default";
  // A device id, not a login id; at most 200 records kept until Flush.
  if (!sensors_analytics::Sdk::Init(argv[1], url, "cpp-device-1", false, 200)) return 1;

  sensors_analytics::PropertiesNode super_properties;
  super_properties.SetString("app_name", "capture");
  sensors_analytics::Sdk::RegisterSuperProperties(super_properties);

  // Each property kind the SDK has: numbers (an int and a double), a bool, a string, a list,
  // and date-times written by the SDK (seconds and milliseconds) and as text.
  sensors_analytics::PropertiesNode properties;
  properties.SetNumber("count", 3);
  properties.SetNumber("price", 3.14);
  properties.SetBool("member", true);
  properties.SetString("name", "测试字符串");
  std::vector<std::string> tags;
  tags.push_back("a");
  tags.push_back("b");
  properties.SetList("tags", tags);
  properties.SetDateTime("paid_at", static_cast<time_t>(1795273119), 7);
  properties.SetDateTime("shipped_at", "2026-11-20 08:30:15.670");
  sensors_analytics::Sdk::Track("BuyBeforeLogin", properties);

  // Login sends $SignUp; later records are the login id's (with $is_login_id).
  sensors_analytics::Sdk::Login("cpp-login-1");
  sensors_analytics::Sdk::Track("AfterLogin");
  sensors_analytics::Sdk::ProfileSetString("nick", "Ann");
  sensors_analytics::Sdk::ProfileIncrement("orders", 2);
  sensors_analytics::Sdk::ProfileAppend("hobby", "movie");
  sensors_analytics::PropertiesNode item;
  item.SetString("title", "Datong");
  sensors_analytics::Sdk::ItemSet("book", "cpp-item-1", item);
  bool sent = sensors_analytics::Sdk::Flush();
  sensors_analytics::Sdk::Shutdown();
  return sent ? 0 : 1;
}
