import RPCTransport

extension RPCClientConfiguration {
    /// For tests' own clients: they check outcomes, so a call may wait a minute for its reply. The
    /// default 10 s was overrun with every suite running at once on a machine four times oversubscribed.
    /// Tests of timeouts set their own, shorter limits.
    public static var patient: RPCClientConfiguration { .init(connections: 1, callTimeout: .seconds(60)) }
}
