import Logging
import NIOCore
import NIOEmbedded
import Testing

@testable import RPCTransport

/// The connection's flow control as a value: pipelining order, the in-flight cap, held reads, draining,
/// the idle deadline and over-long lines, with no socket and no clock.
@Suite struct ConnectionStateMachineTests {
    /// The machine behind a reference, so a transition can be called inside `#expect`.
    final class Flow {
        var m: ConnectionStateMachine<Int>
        init(maxInFlight: Int) { m = ConnectionStateMachine(maxInFlight: maxInFlight) }
    }

    @Test func framesBeyondTheCapWaitInOrderAndReadingPausesUntilThereIsRoom() {
        let flow = Flow(maxInFlight: 2)
        #expect(flow.m.frameReceived(1) == .process)
        flow.m.requestStarted()
        #expect(flow.m.frameReceived(2) == .process)
        flow.m.requestStarted()
        #expect(flow.m.frameReceived(3) == .queued)
        #expect(flow.m.frameReceived(4) == .queued)
        #expect(flow.m.readRequested(writable: true) == .hold)
        #expect(flow.m.nextWaitingFrame() == nil, "no room yet")
        flow.m.requestFinished()
        #expect(flow.m.nextWaitingFrame() == 3)
        flow.m.requestStarted()
        #expect(flow.m.nextWaitingFrame() == nil, "at the cap again")
        #expect(flow.m.shouldResumeReading(writable: true) == false, "frames still wait")
        flow.m.requestFinished()
        #expect(flow.m.nextWaitingFrame() == 4)
        // Immediate requests never count: the waiting queue is empty, reading resumes.
        #expect(flow.m.shouldResumeReading(writable: true) == true)
        #expect(flow.m.shouldResumeReading(writable: true) == false, "a held read is issued once")
    }

    @Test func anUnwritableChannelHoldsReadsUntilItDrains() {
        let flow = Flow(maxInFlight: 4)
        #expect(flow.m.readRequested(writable: false) == .hold)
        #expect(flow.m.shouldResumeReading(writable: false) == false)
        #expect(flow.m.shouldResumeReading(writable: true) == true)
        #expect(flow.m.readRequested(writable: true) == .read)
    }

    @Test func drainingClosesOnlyOnceNothingIsInFlightOrWaiting() {
        let flow = Flow(maxInFlight: 1)
        #expect(flow.m.frameReceived(1) == .process)
        flow.m.requestStarted()
        #expect(flow.m.frameReceived(2) == .queued)
        #expect(flow.m.drainRequested() == false, "a request is in flight")
        #expect(flow.m.readRequested(writable: true) == .hold, "no more reads while draining")
        flow.m.requestFinished()
        #expect(flow.m.nextWaitingFrame() == 2, "frames already read are still answered")
        flow.m.requestStarted()
        #expect(flow.m.shouldCloseNow() == false)
        flow.m.requestFinished()
        #expect(flow.m.nextWaitingFrame() == nil)
        #expect(flow.m.shouldResumeReading(writable: true) == false)
        #expect(flow.m.shouldCloseNow() == true)
        #expect(flow.m.state == .closed)
        #expect(flow.m.frameReceived(3) == .drop)
        let idle = Flow(maxInFlight: 1)
        #expect(idle.m.drainRequested() == true, "nothing in flight: close at once")
    }

    @Test func theIdleDeadlineClosesOnlyAnIdleConnection() {
        let flow = Flow(maxInFlight: 2)
        #expect(flow.m.frameReceived(1) == .process)
        flow.m.requestStarted()
        #expect(flow.m.idleDeadlinePassed() == false, "a slow request is not idleness")
        flow.m.requestFinished()
        #expect(flow.m.idleDeadlinePassed() == true)
        #expect(flow.m.state == .closed)
    }

    @Test func anOverlongLineStopsEverythingAfterIt() {
        let flow = Flow(maxInFlight: 2)
        flow.m.lineTooLong()
        #expect(flow.m.frameReceived(1) == .drop)
        #expect(flow.m.readRequested(writable: true) == .hold)
    }
}

/// The real handler on an embedded channel (EmbeddedChannel's manual clock drives the idle deadline):
/// pipelined requests answered in one write and in order, draining, idleness, and the in-flight cap
/// with requests that finish later, all without sockets or sleeps.
@Suite struct ConnectionHandlerTests {
    static func channel(maxInFlight: Int = 64, idle: TimeAmount = .seconds(30)) throws -> EmbeddedChannel {
        var config = RPCServerConfiguration(serviceName: "test")
        config.maxInFlightPerConnection = maxInFlight
        var logger = Logger(label: "handler-test")
        logger.logLevel = .critical
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(IdleStateHandler(readTimeout: idle))
        try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(LineFrameDecoder(maxLineBytes: 1024)))
        try channel.pipeline.syncOperations.addHandler(RPCConnectionHandler(configuration: config, router: TestServer.router(), logger: logger))
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        return channel
    }

    static func lines(_ channel: EmbeddedChannel) throws -> [String] {
        var out: [String] = []
        while let buffer = try channel.readOutbound(as: ByteBuffer.self) {
            out += String(buffer: buffer).split(separator: "\n").map(String.init)
        }
        return out
    }

    @Test func pipelinedRequestsAreAnsweredInOneWriteInOrder() throws {
        let channel = try Self.channel()
        let burst =
            (1...16).map { #"{"jsonrpc":"2.0","method":"subtract","params":[\#($0 * 10), \#($0)],"id":\#($0)}"# }
            .joined(separator: "\n") + "\n"
        try channel.writeInbound(ByteBuffer(string: burst))
        let first = try channel.readOutbound(as: ByteBuffer.self)
        #expect(try channel.readOutbound(as: ByteBuffer.self) == nil, "one write for the whole burst")
        let replies = String(buffer: try #require(first)).split(separator: "\n").map(String.init)
        #expect(replies == (1...16).map { #"{"jsonrpc":"2.0","id":\#($0),"result":\#($0 * 9)}"# })
        _ = try channel.finish()
    }

    @Test func aDrainClosesAnIdleConnectionAtOnce() throws {
        let channel = try Self.channel()
        channel.pipeline.fireUserInboundEventTriggered(DrainConnectionEvent())
        #expect(!channel.isActive)
    }

    /// NIO's IdleStateHandler times idleness on the wall clock; what this handler decides is what an idle
    /// event does: close a connection with nothing in flight.
    @Test func anIdleEventClosesAConnectionWithNothingInFlight() throws {
        let channel = try Self.channel()
        try channel.writeInbound(ByteBuffer(string: #"{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":1}"# + "\n"))
        #expect(try Self.lines(channel) == [#"{"jsonrpc":"2.0","id":1,"result":3}"#])
        #expect(channel.isActive)
        channel.pipeline.fireUserInboundEventTriggered(IdleStateHandler.IdleStateEvent.read)
        #expect(!channel.isActive)
    }

    /// The partial-line deadline on the embedded loop's manual clock: a line unfinished for the deadline
    /// closes the connection; bytes that keep trickling do not reset it; a finished line does.
    @Test func thePartialLineDeadlineRunsOnTheLoopsClock() throws {
        var logger = Logger(label: "deadline-test")
        logger.logLevel = .critical
        let channel = EmbeddedChannel(handler: PartialLineDeadlineHandler(deadline: .seconds(10), logger: logger))
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        try channel.writeInbound(ByteBuffer(string: "{\"jsonrpc\":"))
        for _ in 0..<9 {
            channel.embeddedEventLoop.advanceTime(by: .seconds(1))
            try channel.writeInbound(ByteBuffer(string: " "))  // trickling: one byte a second
        }
        #expect(channel.isActive)
        channel.embeddedEventLoop.advanceTime(by: .seconds(1))
        #expect(!channel.isActive, "10 s after the line began, trickling or not")

        let finishing = EmbeddedChannel(handler: PartialLineDeadlineHandler(deadline: .seconds(10), logger: logger))
        try finishing.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        try finishing.writeInbound(ByteBuffer(string: "{\"a\":1"))
        finishing.embeddedEventLoop.advanceTime(by: .seconds(9))
        try finishing.writeInbound(ByteBuffer(string: "}\n{\"b\""))  // a line ends; the next one's clock starts now
        finishing.embeddedEventLoop.advanceTime(by: .seconds(9))
        #expect(finishing.isActive)
        try finishing.writeInbound(ByteBuffer(string: ":2}\n"))
        finishing.embeddedEventLoop.advanceTime(by: .seconds(60))
        #expect(finishing.isActive, "no partial line, no deadline")
    }

    @Test func anOverlongLineGetsOneErrorThenTheConnectionCloses() throws {
        let channel = try Self.channel()
        try channel.writeInbound(ByteBuffer(string: String(repeating: "x", count: 2_000)))
        let replies = try Self.lines(channel)
        #expect(replies.count == 1 && replies[0].contains("lineTooLong"))
        #expect(!channel.isActive)
    }

    /// The in-flight cap with requests that finish later, on NIO's thread-safe testing channel: with room
    /// for two, a third request waits until one finishes, even when it could answer at once.
    @Test func aRequestBeyondTheCapWaitsForOneToFinish() async throws {
        let gates = Gates()
        var config = RPCServerConfiguration(serviceName: "test")
        config.maxInFlightPerConnection = 2
        var logger = Logger(label: "handler-test")
        logger.logLevel = .critical
        let channel = NIOAsyncTestingChannel()
        try await channel.pipeline.addHandler(ByteToMessageHandler(LineFrameDecoder(maxLineBytes: 1024)))
        try await channel.pipeline.addHandler(RPCConnectionHandler(configuration: config, router: TestServer.router(gates: gates), logger: logger))
        try await channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1))
        let requests = ["a", "b", "c"].map { #"{"jsonrpc":"2.0","method":"gate.wait","params":{"key":"\#($0)"},"id":"\#($0)"}"# }
        try await channel.writeInbound(ByteBuffer(string: requests.joined(separator: "\n") + "\n"))
        await gates.release("c")  // c could answer at once, but it has not started: a and b hold both slots
        await gates.release("a")
        var ids: [String] = []
        while ids.count < 2 {
            let buffer = try await channel.waitForOutboundWrite(as: ByteBuffer.self)
            ids += String(buffer: buffer).split(separator: "\n").compactMap { $0.firstMatch(of: /"id":"(\w)"/).map { String($0.1) } }
        }
        #expect(ids == ["a", "c"])
        await gates.release("b")
        let last = try await channel.waitForOutboundWrite(as: ByteBuffer.self)
        #expect(String(buffer: last).contains(#""id":"b""#))
        _ = try await channel.finish()
    }
}
