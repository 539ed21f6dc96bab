/*
 * devices.c - Initialization and Device Management: cuInit and the device queries. The software
 * devices are identical but for their PCI bus: each answers every attribute as an H200 does
 * (model/device.c), unless told otherwise.
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

CUSW_EXPORT CUresult cuInit(unsigned int Flags)
{
    CUSW_ENTRY();
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    /* Like the real driver when no device is visible: cuInit fails and the driver stays
     * uninitialised. */
    if (cusw_device_count() == 0)
        return CUDA_ERROR_NO_DEVICE;
    cusw_initialize();
    return CUDA_SUCCESS;
}

CUSW_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    CUSW_INIT_ENTRY();
    if (device == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= cusw_device_count())
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUSW_EXPORT CUresult cuDeviceGetCount(int *count)
{
    CUSW_INIT_ENTRY();
    if (count == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *count = cusw_device_count();
    return CUDA_SUCCESS;
}

CUSW_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    CUSW_INIT_ENTRY();
    CUresult rc = cusw_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (name == NULL || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "Software CUDA Device %d", dev); /* truncates, as the real one */
    return CUDA_SUCCESS;
}

CUSW_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    CUSW_INIT_ENTRY();
    CUresult rc = cusw_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (uuid == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    /* A fixed, recognisable UUID per device ("cusw" then the ordinal). */
    static const char prefix[12] = { 'c', 'u', 's', 'w', 0x5f, 0x64, 0x72, 0x76,
                                     0x00, 0x13, 0x05, 0x00 };
    memcpy(uuid->bytes, prefix, sizeof prefix);
    uuid->bytes[12] = 0;
    uuid->bytes[13] = 0;
    uuid->bytes[14] = 0;
    uuid->bytes[15] = (char)dev;
    return CUDA_SUCCESS;
}

/* Each device has memory of its own, of this size (cuMemGetInfo's total). */
CUSW_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    CUSW_INIT_ENTRY();
    CUresult rc = cusw_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (bytes == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *bytes = (size_t)CUSW_DEVICE_MEMORY_BYTES;
    return CUDA_SUCCESS;
}

CUSW_EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    CUSW_INIT_ENTRY();
    CUresult rc = cusw_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (pi == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return cusw_device_attribute(dev, attrib, pi) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
