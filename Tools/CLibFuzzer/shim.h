// libFuzzer's entry for programs that have their own main (the toolchain's libFuzzer, linked by
// -sanitize=fuzzer). Declared only: nothing links it unless the fuzz build defines FUZZING.
#include <stddef.h>
#include <stdint.h>
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*UserCb)(const uint8_t *Data, size_t Size));
