#include <openssl/evp.h>
#include <openssl/sha.h>
#include <openssl/crypto.h>
