"""The project's own local broker: Maven jars, KRaft start and stop, TLS for the secured one."""
