"""Engine metrics: collected per period (collector), buffered and written by
their own thread (reporter), to InfluxDB (influx: the sinks)."""
