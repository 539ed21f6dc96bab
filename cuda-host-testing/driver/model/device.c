/*
 * device.c - what the software device reports of itself: every CUdevice_attribute, an H200's by
 * default (h200.def), and what the environment (CUSW_DEVICE_ATTRIBUTES, read at load) and the
 * tests (cuswOverrideDeviceAttribute) make it answer instead. Every device answers the same but
 * for its PCI bus and board group.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

struct attribute {
    int number;
    const char *name; /* without the CU_DEVICE_ATTRIBUTE_ prefix */
    int h200;
    atomic_bool replaced; /* by the environment or a test */
    atomic_int value;     /* what it answers while replaced */
};

#define ATTRIBUTE(number, name, h200) { number, #name, h200, false, 0 },
static struct attribute attributes[] = {
#include "h200.def"
};
#undef ATTRIBUTE

#define ATTRIBUTE_COUNT (sizeof attributes / sizeof attributes[0])

static struct attribute *find(int number)
{
    for (size_t i = 0; i < ATTRIBUTE_COUNT; i++)
        if (attributes[i].number == number)
            return &attributes[i];
    return NULL;
}

/* An attribute by its name, with or without the prefix, or by its number. */
static struct attribute *find_named(const char *name, size_t length)
{
    static const char prefix[] = "CU_DEVICE_ATTRIBUTE_";
    if (length > sizeof prefix - 1 && strncmp(name, prefix, sizeof prefix - 1) == 0) {
        name += sizeof prefix - 1;
        length -= sizeof prefix - 1;
    }
    for (size_t i = 0; i < ATTRIBUTE_COUNT; i++)
        if (strlen(attributes[i].name) == length && strncmp(attributes[i].name, name, length) == 0)
            return &attributes[i];
    char *end = NULL;
    long number = strtol(name, &end, 10);
    return end == name + length && length > 0 ? find((int)number) : NULL;
}

/* CUSW_DEVICE_ATTRIBUTES: NAME=VALUE pairs separated by commas (a name with or without its
 * CU_DEVICE_ATTRIBUTE_ prefix, or the attribute's number), e.g.
 * "COMPUTE_CAPABILITY_MAJOR=8,COMPUTE_CAPABILITY_MINOR=0,MEMORY_POOLS_SUPPORTED=0". A pair that
 * names no attribute, or whose value is not an int, is named in the log and left out. */
__attribute__((constructor)) static void read_device_attributes(void)
{
    const char *list = getenv("CUSW_DEVICE_ATTRIBUTES");
    while (list != NULL && *list != '\0') {
        const char *end = strchr(list, ',');
        size_t length = end != NULL ? (size_t)(end - list) : strlen(list);
        const char *equals = memchr(list, '=', length);
        struct attribute *a = equals != NULL ? find_named(list, (size_t)(equals - list)) : NULL;
        char value_text[24] = { 0 };
        size_t value_length = equals != NULL ? length - (size_t)(equals + 1 - list) : 0;
        char *value_end = NULL;
        long value = 0;
        if (a != NULL && value_length > 0 && value_length < sizeof value_text) {
            memcpy(value_text, equals + 1, value_length);
            value = strtol(value_text, &value_end, 10);
        }
        if (value_end != NULL && *value_end == '\0' && value >= INT32_MIN && value <= INT32_MAX) {
            atomic_store(&a->value, (int)value);
            atomic_store(&a->replaced, true);
        } else {
            cusw_log("CUSW_DEVICE_ATTRIBUTES: \"%.*s\" is no NAME=VALUE of a device attribute; "
                     "left out", (int)length, list);
        }
        list = end != NULL ? end + 1 : NULL;
    }
}

bool cusw_device_attribute(int dev, CUdevice_attribute attribute, int *value)
{
    struct attribute *a = find((int)attribute);
    if (a == NULL)
        return false;
    *value = atomic_load(&a->replaced) ? atomic_load(&a->value) : a->h200;
    /* Each device on a bus of its own, as separate GPUs are: libraries tell devices apart by their
     * PCI address. */
    if (attribute == CU_DEVICE_ATTRIBUTE_PCI_BUS_ID ||
        attribute == CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID)
        *value += dev;
    return true;
}

bool cusw_device_supports(CUdevice_attribute attribute)
{
    int value = 0;
    return cusw_device_attribute(0, attribute, &value) && value != 0;
}

bool cusw_override_device_attribute(CUdevice_attribute attribute, const int *value)
{
    struct attribute *a = find((int)attribute);
    if (a == NULL)
        return false;
    if (value != NULL)
        atomic_store(&a->value, *value);
    atomic_store(&a->replaced, value != NULL);
    return true;
}
