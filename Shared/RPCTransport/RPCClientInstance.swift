import JSONRPC
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// One instance of the peer service: its connection pool and whether it is taken out.
final class Endpoint: Sendable {
    let host: String
    let port: Int
    let slots: [ConnectionSlot]
    private let nextSlot = Atomic<Int>(0)
    private let nextAddress = Atomic<Int>(0)
    private let health = NIOLockedValueBox<(failures: Int, ejectedUntil: NIODeadline?)>((0, nil))
    /// Calls in a row that got no answer (timed out, or their connection was lost), and until when keyed calls pass by.
    private let unanswered = Atomic<Int>(0)
    private let unansweringUntil = NIOLockedValueBox<NIODeadline?>(nil)

    private let ejection: TimeAmount

    init(host: String, port: Int, connections: Int, ejection: TimeAmount) {
        self.host = host
        self.port = port
        self.ejection = ejection
        self.slots = (0..<connections).map { _ in ConnectionSlot() }
    }

    var address: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    func isEjected(at now: NIODeadline) -> Bool {
        health.withLockedValue { $0.ejectedUntil.map { $0 > now } ?? false }
    }

    func succeeded() {
        health.withLockedValue { $0 = (0, nil) }
    }

    /// Out for `ejection` (1 s) after the first failure to connect, twice as long after each further one, at most 30x.
    func failed() {
        health.withLockedValue { h in
            h.failures += 1
            let times = min(30, 1 << min(h.failures - 1, 5))
            h.ejectedUntil = .now() + ejection * Int64(times)
        }
    }

    /// A call here got its answer (the instance's own, success or error).
    func answered() {
        guard unanswered.load(ordering: .relaxed) > 0 else { return }
        unanswered.store(0, ordering: .relaxed)
        unansweringUntil.withLockedValue { $0 = nil }
    }

    /// A call here failed: when it got no answer (timed out, connection lost), keyed calls pass this instance by for
    /// `ejection` (1 s), twice as long after each further one in a row, at most 30x.
    func noAnswer(_ error: RPCError) {
        guard error.has(.connectionLost) || error.data.reason == "timeout" else { return answered() }
        let inARow = unanswered.wrappingAdd(1, ordering: .relaxed).newValue
        let times = min(30, 1 << min(inARow - 1, 5))
        unansweringUntil.withLockedValue { $0 = .now() + ejection * Int64(times) }
    }

    func isUnanswering(at now: NIODeadline) -> Bool {
        unanswered.load(ordering: .relaxed) > 0 && unansweringUntil.withLockedValue { $0.map { $0 > now } ?? false }
    }

    /// An open connection on `eventLoop` if one is, else the first open one in turn; nil when the connection
    /// next in turn is not open (so every slot is opened in time by the async path).
    func openConnection(preferring eventLoop: any EventLoop) -> (any Channel)? {
        let start = nextSlot.wrappingAdd(1, ordering: .relaxed).oldValue
        var fallback: (any Channel)?
        for offset in slots.indices {
            guard let channel = slots[(start &+ offset) % slots.count].current(), channel.isActive else {
                if offset == 0 { return nil }
                continue
            }
            if channel.eventLoop === eventLoop { return channel }
            if fallback == nil { fallback = channel }
        }
        return fallback
    }

    func connection(opening connect: () -> EventLoopFuture<any Channel>) async throws(RPCError) -> any Channel {
        let slot = slots[nextSlot.wrappingAdd(1, ordering: .relaxed).oldValue % slots.count]
        if let channel = slot.current(), channel.isActive { return channel }
        do {
            return try await slot.connecting(connect).get()
        } catch let error as RPCError {
            throw error
        } catch {
            throw RPCError.unavailable("cannot reach \(address): \(error)", reason: .connectFailed)
        }
    }

    /// For a host name with several addresses, the next of them in turn (each new connection goes to the next);
    /// nil for an IP address or a name that does not resolve (NIO resolves it when connecting, and reports).
    func nextResolvedAddress() -> SocketAddress? {
        guard (try? SocketAddress(ipAddress: host, port: port)) == nil,
            case let all = Self.resolveAll(host: host, port: port), all.count > 1
        else { return nil }
        return all[nextAddress.wrappingAdd(1, ordering: .relaxed).oldValue % all.count]
    }

    /// Every TCP address `host` resolves to (getaddrinfo), without repeats, in the resolver's order.
    static func resolveAll(host: String, port: Int) -> [SocketAddress] {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var result: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, String(port), &hints, &result) == 0, let first = result else { return [] }
        defer { freeaddrinfo(first) }
        var out: [SocketAddress] = []
        var next: UnsafeMutablePointer<addrinfo>? = first
        while let info = next {
            next = info.pointee.ai_next
            guard let raw = info.pointee.ai_addr else { continue }
            let address: SocketAddress
            switch info.pointee.ai_family {
            case AF_INET: address = raw.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { SocketAddress($0.pointee, host: host) }
            case AF_INET6: address = raw.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { SocketAddress($0.pointee, host: host) }
            default: continue
            }
            if !out.contains(address) { out.append(address) }
        }
        return out
    }
}

/// One pooled connection: the live channel, or the connect attempt every caller waits on.
final class ConnectionSlot: Sendable {
    private enum State {
        case idle
        case connecting(EventLoopFuture<any Channel>)
        case connected(any Channel)
    }
    private let state = NIOLockedValueBox<State>(.idle)

    func current() -> (any Channel)? {
        state.withLockedValue { if case .connected(let c) = $0 { return c } else { return nil } }
    }

    func connecting(_ start: () -> EventLoopFuture<any Channel>) -> EventLoopFuture<any Channel> {
        let (future, started) = state.withLockedValue { state -> (EventLoopFuture<any Channel>, Bool) in
            switch state {
            case .connecting(let f): return (f, false)
            case .connected(let c) where c.isActive: return (c.eventLoop.makeSucceededFuture(c), false)
            default:
                let f = start()
                state = .connecting(f)
                return (f, true)
            }
        }
        if started {
            future.whenComplete { [state] result in
                switch result {
                case .success(let channel):
                    state.withLockedValue { $0 = .connected(channel) }
                    // Outside the lock: a channel that is already closed runs this callback at once, on
                    // this thread, and it takes the lock itself.
                    channel.closeFuture.whenComplete { [state] _ in
                        state.withLockedValue { if case .connected(let c) = $0, c === channel { $0 = .idle } }
                    }
                case .failure:
                    state.withLockedValue { $0 = .idle }
                }
            }
        }
        return future
    }
}
