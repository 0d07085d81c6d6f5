#include <maxminddb.h>
