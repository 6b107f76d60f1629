"""The tables and columns of an nsys SQLite export that :class:`nsys_rules.testing.TraceBuilder` writes.

Column names and types as nsys writes them (the union over the versions the loader reads), so a
built trace goes through the same loader, with the same damage checks, as a real export.
"""

from __future__ import annotations

#: CREATE TABLE bodies by table name.
EXPORT_DDL = {
    "StringIds": "id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL",
    "CUPTI_ACTIVITY_KIND_KERNEL": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, "
        "greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, "
        "demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER, launchType INTEGER, "
        "cacheConfig INTEGER, registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL, gridY INTEGER NOT NULL, "
        "gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL, "
        "staticSharedMemory INTEGER NOT NULL, dynamicSharedMemory INTEGER NOT NULL, localMemoryPerThread INTEGER NOT NULL, "
        "localMemoryTotal INTEGER NOT NULL, gridId INTEGER NOT NULL, sharedMemoryExecuted INTEGER, graphNodeId INTEGER, "
        "sharedMemoryLimitConfig INTEGER"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, globalTid INTEGER, "
        "correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, callchainId INTEGER"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, "
        "greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, "
        "bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL, deprecatedSrcId INTEGER, srcKind INTEGER, dstKind INTEGER, "
        "srcDeviceId INTEGER, srcContextId INTEGER, dstDeviceId INTEGER, dstContextId INTEGER, migrationCause INTEGER, "
        "graphNodeId INTEGER, virtualAddress INTEGER, copyCount INTEGER"),
    "CUPTI_ACTIVITY_KIND_MEMSET": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, "
        "greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, "
        "value INTEGER NOT NULL, bytes INTEGER NOT NULL, graphNodeId INTEGER, memKind INTEGER"),
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, "
        "greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, "
        "syncType INTEGER NOT NULL, eventId INTEGER NOT NULL"),
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, "
        "greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, "
        "graphId INTEGER NOT NULL, graphExecId INTEGER NOT NULL"),
    "NVTX_EVENTS": (
        "start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, category INTEGER, "
        "color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER, domainId INTEGER, "
        "uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER, int32Value INTEGER, "
        "floatValue REAL, jsonTextId INTEGER, jsonText TEXT, binaryData TEXT"),
    "NVTX_PAYLOAD_SCHEMAS": (
        "domainId INTEGER, schemaId INTEGER, name TEXT, type INTEGER, flags INTEGER, numEntries INTEGER, "
        "payloadSize INTEGER, alignTo INTEGER"),
    "NVTX_PAYLOAD_SCHEMA_ENTRIES": (
        "domainId INTEGER NOT NULL, schemaId INTEGER NOT NULL, idx INTEGER NOT NULL, flags INTEGER, type INTEGER, "
        "name TEXT, description TEXT, arrayOrUnionDetail INTEGER, offset INTEGER"),
    "NVTX_PAYLOAD_ENUMS": "domainId INTEGER, schemaId INTEGER, name TEXT, numEntries INTEGER, size INTEGER",
    "NVTX_PAYLOAD_ENUM_ENTRIES": (
        "domainId INTEGER NOT NULL, schemaId INTEGER NOT NULL, idx INTEGER NOT NULL, name TEXT, value INTEGER, "
        "isFlag INTEGER"),
    "CUDA_CALLCHAINS": (
        "id INTEGER NOT NULL, symbol INTEGER NOT NULL, module INTEGER NOT NULL, unresolved INTEGER, "
        "originalIP INTEGER, stackDepth INTEGER NOT NULL, PRIMARY KEY (id, stackDepth)"),
    "CUDA_GPU_MEMORY_USAGE_EVENTS": (
        "start INTEGER NOT NULL, globalPid INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, "
        "address INTEGER NOT NULL, pc INTEGER NOT NULL, bytes INTEGER NOT NULL, memKind INTEGER NOT NULL, "
        "memoryOperationType INTEGER NOT NULL, name TEXT, correlationId INTEGER, streamId INTEGER"),
    "OSRT_API": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, globalTid INTEGER, "
        "nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, nestingLevel INTEGER, callchainId INTEGER NOT NULL"),
    "PROFILER_OVERHEAD": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, globalTid INTEGER, nameId INTEGER NOT NULL, "
        "returnValue INTEGER NOT NULL"),
    "TARGET_INFO_SESSION_START_TIME": "utcEpochNs INTEGER, utcTime TEXT, localTime TEXT, systemClockNs INTEGER",
    "TARGET_INFO_GPU": (
        "vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT, busLocation TEXT, isDiscrete INTEGER, l2CacheSize INTEGER, "
        "totalMemory INTEGER, memoryBandwidth INTEGER, clockRate INTEGER, smCount INTEGER, chipName TEXT, "
        "computeMajor INTEGER, computeMinor INTEGER"),
    "ThreadNames": "nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER",
    "TARGET_INFO_GPU_METRICS": (
        "typeId INTEGER NOT NULL, sourceId INTEGER NOT NULL, typeName TEXT NOT NULL, metricId INTEGER NOT NULL, "
        "metricName TEXT NOT NULL"),
    "GPU_METRICS": (
        "rawTimestamp INTEGER NOT NULL, timestamp INTEGER NOT NULL, typeId INTEGER NOT NULL, metricId INTEGER NOT NULL, "
        "value INTEGER NOT NULL"),
    "META_DATA_CAPTURE": "name TEXT NOT NULL, value TEXT",
    "META_DATA_EXPORT": "name TEXT NOT NULL, value TEXT",
    "EXPORT_META_DATA": "name TEXT NOT NULL, value TEXT",
}
