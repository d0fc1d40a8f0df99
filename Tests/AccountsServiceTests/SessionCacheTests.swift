import Foundation
import NIOConcurrencyHelpers
import PostgresSupport
import Testing

@testable import AccountsService

/// The rules of the session cache on a clock the test moves: kept only while its listener listens, never kept from a
/// read a revocation raced, forgotten per account, trusted for a bounded time, bounded in size.
struct SessionCacheTests {
    final class Clock: Sendable {
        let ms = NIOLockedValueBox<Int64>(1_000)
        func advance(_ by: Int64) { ms.withLockedValue { $0 += by } }
    }

    static func row(_ n: Int, account: String = "acct-1") -> SessionRow {
        SessionRow(
            tokenHash: Data(repeating: UInt8(n % 256), count: 31) + Data([UInt8(n / 256)]), accountId: account, username: "u",
            appAccountToken: "t", deviceName: nil, createdAtMs: 0, lastSeenAtMs: 0, expiresAtMs: 1 << 40)
    }

    static func cache(trustMs: Int64 = 5_000, capacity: Int = 100) -> (SessionCache, Clock) {
        let clock = Clock()
        return (SessionCache(trustMs: trustMs, capacity: capacity, now: { clock.ms.withLockedValue { $0 } }), clock)
    }

    @Test func nothingIsKeptUnlessTheListenerListens() {
        let (cache, _) = Self.cache()
        let r = Self.row(1)
        cache.keep(r, readUnder: cache.ticket())
        #expect(cache.session(r.tokenHash) == nil, "kept before the listener listened")
        cache.heard(.listening)
        cache.keep(r, readUnder: cache.ticket())
        #expect(cache.session(r.tokenHash) == r)
        cache.heard(.lost)
        #expect(cache.session(r.tokenHash) == nil, "answered after the listener lost its connection")
        cache.keep(r, readUnder: cache.ticket())
        #expect(cache.count == 0)
        cache.heard(.listening)
        #expect(cache.session(r.tokenHash) == nil, "a reconnected listener starts from nothing")
    }

    @Test func aReadThatARevocationRacedIsNotKept() {
        let (cache, _) = Self.cache()
        cache.heard(.listening)
        let r = Self.row(1)
        let ticket = cache.ticket()  // the read starts; the database still has the session
        cache.heard(.notified("acct-other"))  // any revocation heard meanwhile
        cache.keep(r, readUnder: ticket)
        #expect(cache.session(r.tokenHash) == nil)
        cache.keep(r, readUnder: cache.ticket())
        #expect(cache.session(r.tokenHash) == r)
    }

    /// A sign-out on this instance (known by its token only) also stops a read that began before it from being kept.
    @Test func aSignOutHereCancelsAReadInFlight() {
        let (cache, _) = Self.cache()
        cache.heard(.listening)
        let r = Self.row(1)
        let ticket = cache.ticket()
        cache.forget(tokenHash: r.tokenHash)
        cache.keep(r, readUnder: ticket)
        #expect(cache.session(r.tokenHash) == nil)
    }

    /// Trust runs from the moment the read began, not from when its answer came back.
    @Test func trustCountsFromTheReadsStart() {
        let (cache, clock) = Self.cache(trustMs: 5_000)
        cache.heard(.listening)
        let r = Self.row(1)
        let ticket = cache.ticket()
        clock.advance(4_000)
        cache.keep(r, readUnder: ticket)
        #expect(cache.session(r.tokenHash) == r)
        clock.advance(1_000)
        #expect(cache.session(r.tokenHash) == nil)
        let slow = cache.ticket()
        clock.advance(5_000)
        cache.keep(r, readUnder: slow)
        #expect(cache.count == 0, "a read slower than the trust kept")
    }

    @Test func aRevocationForgetsThatAccountsSessionsOnly() {
        let (cache, _) = Self.cache()
        cache.heard(.listening)
        let mine = [Self.row(1), Self.row(2)]
        let theirs = Self.row(3, account: "acct-2")
        for r in mine + [theirs] { cache.keep(r, readUnder: cache.ticket()) }
        cache.heard(.notified("acct-1"))
        for r in mine { #expect(cache.session(r.tokenHash) == nil) }
        #expect(cache.session(theirs.tokenHash) == theirs)
        cache.forget(tokenHash: theirs.tokenHash)
        #expect(cache.session(theirs.tokenHash) == nil)
    }

    @Test func aRowIsTrustedForABoundedTime() {
        let (cache, clock) = Self.cache(trustMs: 5_000)
        cache.heard(.listening)
        let r = Self.row(1)
        cache.keep(r, readUnder: cache.ticket())
        clock.advance(4_999)
        #expect(cache.session(r.tokenHash) == r)
        clock.advance(1)
        #expect(cache.session(r.tokenHash) == nil)
        #expect(cache.count == 0)
    }

    @Test func aTouchSlidesTheKeptRowButRevivesNone() {
        let (cache, _) = Self.cache()
        cache.heard(.listening)
        let r = Self.row(1)
        cache.keep(r, readUnder: cache.ticket())
        cache.touched(r.tokenHash, lastSeenAtMs: 7, expiresAtMs: 9)
        #expect(cache.session(r.tokenHash)?.lastSeenAtMs == 7)
        #expect(cache.session(r.tokenHash)?.expiresAtMs == 9)
        cache.heard(.notified("acct-1"))
        cache.touched(r.tokenHash, lastSeenAtMs: 8, expiresAtMs: 10)
        #expect(cache.session(r.tokenHash) == nil)
    }

    /// Full, the cache drops what is stale and keeps what is not (each still forgotten with its account), or
    /// everything when more than half would stay.
    @Test func theCacheIsBoundedAndStillForgetsWhatItKeeps() {
        let (cache, clock) = Self.cache(trustMs: 5_000, capacity: 10)
        cache.heard(.listening)
        for n in 0..<8 { cache.keep(Self.row(n, account: "acct-old"), readUnder: cache.ticket()) }
        clock.advance(3_000)
        let fresh = [Self.row(8, account: "acct-2"), Self.row(9, account: "acct-3")]
        for r in fresh { cache.keep(r, readUnder: cache.ticket()) }
        #expect(cache.count == 10)
        clock.advance(2_000)  // the first eight are stale now, the last two are not
        let newest = Self.row(10, account: "acct-2")
        cache.keep(newest, readUnder: cache.ticket())
        #expect(cache.count == 3)
        #expect(cache.session(fresh[1].tokenHash) == fresh[1])
        cache.heard(.notified("acct-2"))
        #expect(cache.session(fresh[0].tokenHash) == nil)
        #expect(cache.session(newest.tokenHash) == nil)
        #expect(cache.session(fresh[1].tokenHash) == fresh[1])
        // Full of trusted rows: all go.
        for n in 11..<20 { cache.keep(Self.row(n, account: "acct-\(n % 3)"), readUnder: cache.ticket()) }
        #expect(cache.count == 10)
        cache.keep(Self.row(20), readUnder: cache.ticket())
        #expect(cache.count == 1)
    }
}
