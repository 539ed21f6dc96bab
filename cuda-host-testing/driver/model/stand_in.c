/*
 * stand_in.c - the kernels' stand-ins (stand_in.h): registered by name from the process
 * (cuswRegisterStandIn) or by the libraries CUSW_STAND_INS names (colon-separated paths, loaded
 * the first time a stand-in is looked up, each asked to register its own through
 * cusw_register_stand_ins), and the kernels launched without one: counted, and each named in the
 * log the first time. Behind a mutex of its own, never held while a library's code runs.
 */
#include "internal.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

struct registration {
    struct registration *next;
    char *kernel;
    cuswStandIn stand_in;
    void *user_data;
    bool logged; /* without a stand-in: named in the log */
};

static pthread_mutex_t registrations_lock = PTHREAD_MUTEX_INITIALIZER;
static struct registration *registrations;
static atomic_ullong launches_without;

/* [registrations_lock] The kernel's row, made when `create`. */
static struct registration *row(const char *kernel, bool create)
{
    for (struct registration *r = registrations; r != NULL; r = r->next)
        if (strcmp(r->kernel, kernel) == 0)
            return r;
    if (!create)
        return NULL;
    struct registration *r = calloc(1, sizeof *r);
    if (r == NULL || (r->kernel = strdup(kernel)) == NULL) {
        free(r);
        return NULL;
    }
    r->next = registrations;
    registrations = r;
    return r;
}

CUresult cusw_stand_in_register(const char *kernel, cuswStandIn stand_in, void *user_data)
{
    pthread_mutex_lock(&registrations_lock);
    struct registration *r = row(kernel, true);
    if (r != NULL) {
        r->stand_in = stand_in;
        r->user_data = user_data;
    }
    pthread_mutex_unlock(&registrations_lock);
    return r != NULL ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static int register_from_library(const char *kernel, cuswStandIn stand_in, void *user_data)
{
    return kernel == NULL ? CUDA_ERROR_INVALID_VALUE
                          : (int)cusw_stand_in_register(kernel, stand_in, user_data);
}

static pthread_once_t libraries_once = PTHREAD_ONCE_INIT;

/* Each library named in CUSW_STAND_INS, loaded for good, registers its stand-ins. One that does
 * not load, or lacks cusw_register_stand_ins, is named in the log. */
static void load_libraries(void)
{
    const char *list = getenv("CUSW_STAND_INS");
    if (list == NULL)
        return;
    char *paths = strdup(list);
    for (char *save = NULL, *path = paths != NULL ? strtok_r(paths, ":", &save) : NULL;
         path != NULL; path = strtok_r(NULL, ":", &save)) {
        void *library = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
        void (*init)(cuswRegisterStandInFn) = NULL;
        if (library != NULL)
            *(void **)&init = dlsym(library, "cusw_register_stand_ins");
        if (init == NULL) {
            cusw_log("CUSW_STAND_INS: %s %s", path,
                     library == NULL ? dlerror() : "exports no cusw_register_stand_ins");
            continue;
        }
        init(register_from_library);
    }
    free(paths);
}

bool cusw_stand_in_find(const char *kernel, cuswStandIn *stand_in, void **user_data)
{
    pthread_once(&libraries_once, load_libraries);
    pthread_mutex_lock(&registrations_lock);
    const struct registration *r = row(kernel, false);
    bool found = r != NULL && r->stand_in != NULL;
    if (found) {
        *stand_in = r->stand_in;
        *user_data = r->user_data;
    }
    pthread_mutex_unlock(&registrations_lock);
    return found;
}

void cusw_stand_in_missing(const char *kernel)
{
    atomic_fetch_add(&launches_without, 1);
    pthread_mutex_lock(&registrations_lock);
    struct registration *r = row(kernel, true);
    bool first = r != NULL && !r->logged;
    if (r != NULL)
        r->logged = true;
    pthread_mutex_unlock(&registrations_lock);
    if (first)
        cusw_log("kernel %s has no stand-in: its launches do nothing (cuswRegisterStandIn, or "
                 "a library in CUSW_STAND_INS, gives it one)",
                 kernel);
}

unsigned long long cusw_stand_in_missing_launches(void) { return atomic_load(&launches_without); }
