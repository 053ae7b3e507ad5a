/*
 * The one dlopen loop, for libibverbs (at import, module.c) and librdmacm
 * (on first use, rdmacm.c).  The slots, trampolines and symbol table of
 * each come from one template (templates/loader.c.h.j2, rendered as
 * generated/loader.c.h and generated/rdmacm_loader.c.h).
 *
 * The only file calling the dl* functions: the .symver pins below must sit
 * with those calls.
 */
#include "common.h"

#include <dlfcn.h>
#include <stdlib.h>

/* Bind dlopen/dlsym/dlerror/dlclose to their oldest versions (in libdl
 * before glibc 2.34, in libc since): the wheel then loads on any glibc
 * from 2.17, not only on 2.34 and newer.  See README, "manylinux floor". */
#if defined(__x86_64__) && defined(__GLIBC__)
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
__asm__(".symver dlerror,dlerror@GLIBC_2.2.5");
__asm__(".symver dlclose,dlclose@GLIBC_2.2.5");
#elif defined(__aarch64__) && defined(__GLIBC__)   /* aarch64 glibc starts at 2.17 */
__asm__(".symver dlopen,dlopen@GLIBC_2.17");
__asm__(".symver dlsym,dlsym@GLIBC_2.17");
__asm__(".symver dlerror,dlerror@GLIBC_2.17");
__asm__(".symver dlclose,dlclose@GLIBC_2.17");
#endif

void *ibp_load_symbols(const struct ibp_library *lib, PyObject *error)
{
    const char *path = getenv(lib->env);
    if (path == NULL || *path == '\0')
        path = lib->soname;
    void *handle = dlopen(path, RTLD_NOW | (lib->global ? RTLD_GLOBAL : RTLD_LOCAL));
    if (handle == NULL) {
        const char *why = dlerror();
        PyErr_Format(error, lib->cannot_load, path, why ? why : "unknown error");
        return NULL;
    }
    for (const struct ibp_symbol *s = lib->symbols; s->name; s++) {
        *s->slot = dlsym(handle, s->name);
        if (*s->slot == NULL && s->since == NULL) {
            PyErr_Format(error, lib->lacks, path, s->name);
            /* No trampoline may call into the library about to go. */
            for (const struct ibp_symbol *t = lib->symbols; t->name; t++)
                *t->slot = NULL;
            dlclose(handle);
            return NULL;
        }
    }
    return handle;
}
