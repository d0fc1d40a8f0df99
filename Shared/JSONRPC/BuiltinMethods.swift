/// Methods every server answers, whatever its service.
public enum RPCPing: RPCMethod {
    public typealias Params = EmptyParams
    public typealias Result = String
    public static let name = "rpc.ping"
    public static let summary = "Liveness check: answers \"pong\"."
}

public enum RPCDiscover: RPCMethod {
    public typealias Params = EmptyParams
    public typealias Result = JSONValue
    public static let name = "rpc.discover"
    public static let summary = "The OpenRPC 1.x document describing every method of this service."
}

public enum HealthCheck: RPCMethod {
    public typealias Params = EmptyParams
    public typealias Result = HealthReport
    public static let name = "health.check"
    public static let summary = "Service status, version, uptime, and the status of each service it depends on."
}

public struct HealthReport: Codable, Sendable, Equatable {
    /// `ok` when every dependency answers, `degraded` otherwise.
    public var status: HealthStatus
    public var service: String
    public var version: String
    public var uptimeMs: Int64
    public var dependencies: [DependencyHealth]

    public init(status: HealthStatus, service: String, version: String, uptimeMs: Int64, dependencies: [DependencyHealth]) {
        self.status = status
        self.service = service
        self.version = version
        self.uptimeMs = uptimeMs
        self.dependencies = dependencies
    }
}

public enum HealthStatus: String, Codable, Sendable, JSONSchemaEnum {
    case ok, degraded, down
}

public struct DependencyHealth: Codable, Sendable, Equatable {
    public var name: String
    public var address: String?
    public var status: HealthStatus
    public var latencyMs: Int64?
    public var error: String?

    public init(name: String, address: String? = nil, status: HealthStatus, latencyMs: Int64? = nil, error: String? = nil) {
        self.name = name
        self.address = address
        self.status = status
        self.latencyMs = latencyMs
        self.error = error
    }
}
