"""pprof's ``perftools.profiles.Profile`` message for the official protobuf runtime, declared
field by field from github.com/google/pprof/proto/profile.proto (numbers and types as there), so
tests decode our hand-written bytes with a real protobuf parser."""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto
REPEATED, OPTIONAL = F.LABEL_REPEATED, F.LABEL_OPTIONAL
SCALARS = {"int64": F.TYPE_INT64, "uint64": F.TYPE_UINT64, "string": F.TYPE_STRING,
           "bool": F.TYPE_BOOL}

MESSAGES = {
    "Profile": [("sample_type", 1, "ValueType", 1), ("sample", 2, "Sample", 1),
                ("mapping", 3, "Mapping", 1), ("location", 4, "Location", 1),
                ("function", 5, "Function", 1), ("string_table", 6, "string", 1),
                ("drop_frames", 7, "int64", 0), ("keep_frames", 8, "int64", 0),
                ("time_nanos", 9, "int64", 0), ("duration_nanos", 10, "int64", 0),
                ("period_type", 11, "ValueType", 0), ("period", 12, "int64", 0),
                ("comment", 13, "int64", 1), ("default_sample_type", 14, "int64", 0)],
    "ValueType": [("type", 1, "int64", 0), ("unit", 2, "int64", 0)],
    "Sample": [("location_id", 1, "uint64", 1), ("value", 2, "int64", 1),
               ("label", 3, "Label", 1)],
    "Label": [("key", 1, "int64", 0), ("str", 2, "int64", 0), ("num", 3, "int64", 0),
              ("num_unit", 4, "int64", 0)],
    "Mapping": [("id", 1, "uint64", 0), ("memory_start", 2, "uint64", 0),
                ("memory_limit", 3, "uint64", 0), ("file_offset", 4, "uint64", 0),
                ("filename", 5, "int64", 0), ("build_id", 6, "int64", 0),
                ("has_functions", 7, "bool", 0), ("has_filenames", 8, "bool", 0),
                ("has_line_numbers", 9, "bool", 0), ("has_inline_frames", 10, "bool", 0)],
    "Location": [("id", 1, "uint64", 0), ("mapping_id", 2, "uint64", 0),
                 ("address", 3, "uint64", 0), ("line", 4, "Line", 1),
                 ("is_folded", 5, "bool", 0)],
    "Line": [("function_id", 1, "uint64", 0), ("line", 2, "int64", 0)],
    "Function": [("id", 1, "uint64", 0), ("name", 2, "int64", 0), ("system_name", 3, "int64", 0),
                 ("filename", 4, "int64", 0), ("start_line", 5, "int64", 0)],
}


def profile_class():
    """The generated message class for ``perftools.profiles.Profile`` (proto3)."""
    fd = descriptor_pb2.FileDescriptorProto(name="deepcontext_test_profile.proto",
                                            package="perftools.profiles", syntax="proto3")
    for msg_name, fields in MESSAGES.items():
        msg = fd.message_type.add(name=msg_name)
        for name, number, typ, repeated in fields:
            field = msg.field.add(name=name, number=number,
                                  label=REPEATED if repeated else OPTIONAL)
            if typ in SCALARS:
                field.type = SCALARS[typ]
            else:
                field.type = F.TYPE_MESSAGE
                field.type_name = f".perftools.profiles.{typ}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("perftools.profiles.Profile"))
