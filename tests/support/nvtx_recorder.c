/*
 * An NVTX injection library for the tests of cuda-host's `nvtx` feature (`tests/nvtx.rs`): it
 * attaches as a profiler does, through NVTX's injection protocol (`InitializeInjectionNvtx2`,
 * handed the client's export-table getter), implements the domain and core calls cuda-host makes,
 * and records each call as one line of text:
 *
 *     init
 *     domain <name>
 *     category <id> <name>
 *     push <thread> <category> <message>
 *     pop <thread>
 *     mark <thread> <category> <payload> <message>
 *
 * where <thread> is a small number per thread, in the order threads first called. A test reads
 * the lines with `nvtx_recorder_events`, clears them with `nvtx_recorder_clear`, and may install
 * a hook called after every push and mark, with no lock held, on the calling thread
 * (`nvtx_recorder_set_hook`): a profiler that calls the application back.
 *
 * Built by the suite's build script into a shared library when the `nvtx` feature is on.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef void (*function_pointer)(void);

typedef struct {
    size_t struct_size;
    int (*get_module_function_table)(int module, function_pointer ***table, unsigned int *size);
} callbacks_table;

typedef struct {
    uint16_t version;
    uint16_t size;
    uint32_t category;
    int32_t color_type;
    uint32_t color;
    int32_t payload_type;
    int32_t reserved0;
    uint64_t payload;
    int32_t message_type;
    const char *message;
} event_attributes;

enum {
    MODULE_CORE = 1,
    MODULE_CORE2 = 5,
    CORE_MARK_EX = 1,
    CORE_RANGE_PUSH_EX = 8,
    CORE_RANGE_POP = 11,
    CORE2_DOMAIN_MARK_EX = 1,
    CORE2_DOMAIN_RANGE_PUSH_EX = 4,
    CORE2_DOMAIN_RANGE_POP = 5,
    CORE2_DOMAIN_NAME_CATEGORY_A = 8,
    CORE2_DOMAIN_CREATE_A = 12,
    EXPORT_TABLE_CALLBACKS = 1,
    MESSAGE_TYPE_ASCII = 1,
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char events[1 << 20];
static size_t events_length;
static pthread_t threads[64];
static int thread_count;
static void (*hook)(const char *event);
static char domain_handle;

/* The calling thread's number; under the lock. */
static int thread_number(void) {
    pthread_t self = pthread_self();
    for (int index = 0; index < thread_count; index++) {
        if (pthread_equal(threads[index], self)) {
            return index;
        }
    }
    if (thread_count < 64) {
        threads[thread_count] = self;
        return thread_count++;
    }
    return 64;
}

/* Appends a line. */
static void record(const char *format, ...) __attribute__((format(printf, 1, 2)));

static void record(const char *format, ...) {
    va_list arguments;
    va_start(arguments, format);
    pthread_mutex_lock(&lock);
    size_t room = sizeof(events) - events_length;
    int written = vsnprintf(events + events_length, room, format, arguments);
    if (written > 0 && (size_t)written < room) {
        events_length += (size_t)written;
    }
    pthread_mutex_unlock(&lock);
    va_end(arguments);
}

static int current_thread(void) {
    pthread_mutex_lock(&lock);
    int number = thread_number();
    pthread_mutex_unlock(&lock);
    return number;
}

static void call_hook(const char *event) {
    pthread_mutex_lock(&lock);
    void (*installed)(const char *) = hook;
    pthread_mutex_unlock(&lock);
    if (installed) {
        installed(event);
    }
}

static const char *message_of(const event_attributes *attributes) {
    if (attributes == NULL || attributes->message_type != MESSAGE_TYPE_ASCII ||
        attributes->message == NULL) {
        return "?";
    }
    return attributes->message;
}

static void *domain_create(const char *name) {
    record("domain %s\n", name);
    return &domain_handle;
}

static void domain_name_category(void *domain, uint32_t category, const char *name) {
    (void)domain;
    record("category %u %s\n", category, name);
}

static int domain_push(void *domain, const event_attributes *attributes) {
    (void)domain;
    record("push %d %u %s\n", current_thread(), attributes->category, message_of(attributes));
    call_hook("push");
    return 0;
}

static int domain_pop(void *domain) {
    (void)domain;
    record("pop %d\n", current_thread());
    return 0;
}

static void domain_mark(void *domain, const event_attributes *attributes) {
    (void)domain;
    record("mark %d %u %llu %s\n", current_thread(), attributes->category,
           (unsigned long long)attributes->payload, message_of(attributes));
    call_hook("mark");
}

static int core_push(const event_attributes *attributes) {
    return domain_push(NULL, attributes);
}

static int core_pop(void) {
    return domain_pop(NULL);
}

static void core_mark(const event_attributes *attributes) {
    domain_mark(NULL, attributes);
}

EXPORT int InitializeInjectionNvtx2(const void *(*get_export_table)(uint32_t));

EXPORT int InitializeInjectionNvtx2(const void *(*get_export_table)(uint32_t)) {
    const callbacks_table *callbacks = get_export_table(EXPORT_TABLE_CALLBACKS);
    if (callbacks == NULL || callbacks->struct_size < sizeof(callbacks_table)) {
        return 0;
    }
    function_pointer **core = NULL;
    function_pointer **core2 = NULL;
    unsigned int core_size = 0;
    unsigned int core2_size = 0;
    if (!callbacks->get_module_function_table(MODULE_CORE, &core, &core_size) ||
        !callbacks->get_module_function_table(MODULE_CORE2, &core2, &core2_size) ||
        core_size <= CORE_RANGE_POP || core2_size <= CORE2_DOMAIN_CREATE_A) {
        return 0;
    }
    *core[CORE_MARK_EX] = (function_pointer)core_mark;
    *core[CORE_RANGE_PUSH_EX] = (function_pointer)core_push;
    *core[CORE_RANGE_POP] = (function_pointer)core_pop;
    *core2[CORE2_DOMAIN_MARK_EX] = (function_pointer)domain_mark;
    *core2[CORE2_DOMAIN_RANGE_PUSH_EX] = (function_pointer)domain_push;
    *core2[CORE2_DOMAIN_RANGE_POP] = (function_pointer)domain_pop;
    *core2[CORE2_DOMAIN_NAME_CATEGORY_A] = (function_pointer)domain_name_category;
    *core2[CORE2_DOMAIN_CREATE_A] = (function_pointer)domain_create;
    record("init\n");
    return 1;
}

/* Copies the recorded lines, NUL-terminated, into `buffer` (up to `size` bytes); returns how
 * many bytes they take, without the NUL. */
EXPORT size_t nvtx_recorder_events(char *buffer, size_t size);

EXPORT size_t nvtx_recorder_events(char *buffer, size_t size) {
    pthread_mutex_lock(&lock);
    size_t length = events_length;
    if (buffer != NULL && size > 0) {
        size_t copied = length < size - 1 ? length : size - 1;
        memcpy(buffer, events, copied);
        buffer[copied] = '\0';
    }
    pthread_mutex_unlock(&lock);
    return length;
}

/* Forgets the recorded lines. */
EXPORT void nvtx_recorder_clear(void);

EXPORT void nvtx_recorder_clear(void) {
    pthread_mutex_lock(&lock);
    events_length = 0;
    pthread_mutex_unlock(&lock);
}

/* Installs `installed` (NULL: none), called after every push and mark on the calling thread. */
EXPORT void nvtx_recorder_set_hook(void (*installed)(const char *event));

EXPORT void nvtx_recorder_set_hook(void (*installed)(const char *event)) {
    pthread_mutex_lock(&lock);
    hook = installed;
    pthread_mutex_unlock(&lock);
}
