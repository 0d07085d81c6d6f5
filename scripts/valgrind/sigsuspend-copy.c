/* Preloaded into the services when scripts/bench e2e --callgrind runs them under valgrind.
 * Valgrind 3.19 writes to the signal mask a program gives rt_sigsuspend, and libdispatch (which
 * every Swift program with an async main parks its main thread in) passes one that lies in
 * read-only memory: valgrind dies of a SIGSEGV of its own. This hands the call a writable copy. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>

int sigsuspend(const sigset_t *mask) {
    static int (*real)(const sigset_t *);
    if (!real) real = (int (*)(const sigset_t *))dlsym(RTLD_NEXT, "sigsuspend");
    sigset_t copy = *mask;
    return real(&copy);
}
