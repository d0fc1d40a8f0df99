import JSONRPC

/// A check of one service this one depends on, reported by `health.check`.
public struct HealthProbe: Sendable {
    public var name: String
    public var check: @Sendable () async -> DependencyHealth

    public init(name: String, check: @escaping @Sendable () async -> DependencyHealth) {
        self.name = name
        self.check = check
    }
}
