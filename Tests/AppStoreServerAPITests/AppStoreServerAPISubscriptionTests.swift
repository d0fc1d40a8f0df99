import AppStoreServerAPI
import AppStoreSimulator
import AsyncHTTPClient
import Foundation
import Hummingbird
import IAPProtocol
import JSONRPC
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import Receipts
import Testing

/// A webhook for the simulator to deliver to: records every signed payload; answers 500 while `failing`.
final class NotificationReceiver: Sendable {
    let payloads = NIOLockedValueBox<[String]>([])
    let failing = NIOLockedValueBox(false)
    private let port = NIOLockedValueBox(0)
    private let app = NIOLockedValueBox<Task<Void, any Error>?>(nil)
    var url: String { "http://127.0.0.1:\(port.withLockedValue { $0 })/hook" }

    static func start() async throws -> NotificationReceiver {
        let receiver = NotificationReceiver()
        let router = Router()
        router.post("hook") { request, _ -> Response in
            var request = request
            let buffer = try await request.collectBody(upTo: 1 << 20)
            if receiver.failing.withLockedValue({ $0 }) { return Response(status: .internalServerError) }
            let object = try? JSONDecoder().decode(JSONValue.self, from: Data(buffer.readableBytesView))
            receiver.payloads.withLockedValue { $0.append(object?["signedPayload"]?.stringValue ?? "") }
            return Response(status: .ok)
        }
        var quiet = Logger(label: "receiver")
        quiet.logLevel = .critical
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let application = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { continuation.yield($0.localAddress?.port ?? 0) }, logger: quiet)
        receiver.app.withLockedValue { $0 = Task { try await application.run() } }
        var iterator = ports.makeAsyncIterator()
        let port = try #require(await iterator.next())
        receiver.port.withLockedValue { $0 = port }
        return receiver
    }

    func stop() { app.withLockedValue { $0?.cancel() } }
}

/// The simulator's subscription, refund, consumption, account-token and extension endpoints, its
/// notification delivery and Notification History, over real HTTP, through the shared client.
@Suite struct AppStoreServerAPISubscriptionTests {
    typealias API = AppStoreServerAPITests

    static func blocking<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await NIOThreadPool.singleton.runIfActive(body)
    }

    static func send(_ method: HTTPMethod, _ url: String, token: String, body: String) async throws -> (status: Int, body: JSONValue?) {
        var request = HTTPClientRequest(url: url)
        request.method = method
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        request.body = .bytes(ByteBuffer(string: body))
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let bytes = try await response.body.collect(upTo: 8 << 20)
        return (Int(response.status.code), try? JSONDecoder().decode(JSONValue.self, from: Data(bytes.readableBytesView)))
    }

    @Test func statusesShowActiveExpiredAndRevokedWithVerifiedRenewalInfo() async throws {
        try await API.serve { served in
            let sim = served.simulator
            let monthly = try await API.buy(sim, "sub.monthly", .autoRenewable)
            let yearly = try await API.buy(sim, "sub.yearly", .autoRenewable)
            // The customer turns auto-renew off for the monthly one: it expires when its period ends.
            let off = try await Self.blocking {
                try sim.setAutoRenew(.init(appleId: "ann@icloud", transactionId: monthly.transactionId, enabled: false))
            }
            #expect(off.signedPayload != nil)
            let advanced = try await Self.blocking { try sim.advanceClock(.init(seconds: 31 * 86_400)) }
            #expect(advanced.renewals == 1)  // only the yearly one renews
            let client = try served.client()
            var statuses = try await client.subscriptionStatuses(monthly.transactionId)
            #expect(statuses.count == 2)
            let expired = try #require(statuses.first { $0.originalTransactionId == monthly.originalTransactionId })
            #expect(expired.status == 2)
            #expect(expired.renewalInfo.payload["autoRenewStatus"]?.intValue == 0)
            #expect(expired.renewalInfo.payload["expirationIntent"]?.intValue == 1)
            let active = try #require(statuses.first { $0.originalTransactionId == yearly.originalTransactionId })
            #expect(active.status == 1)
            #expect(active.renewalInfo.payload["autoRenewStatus"]?.intValue == 1)
            #expect(active.transaction.payload["transactionReason"]?.stringValue == "RENEWAL")
            // Refunding the current period revokes it.
            let current = try #require(active.transaction.transactionId)
            _ = try await Self.blocking { try sim.refund(.init(appleId: "ann@icloud", transactionId: current)) }
            statuses = try await client.subscriptionStatuses(monthly.transactionId, statuses: [5])
            #expect(statuses.map(\.originalTransactionId) == [yearly.originalTransactionId])
            #expect(try await client.subscriptionStatuses(monthly.transactionId, statuses: [1]).isEmpty)
            let bad = try await API.get(served.base + "/inApps/v1/subscriptions/\(monthly.transactionId)?status=9", token: try API.token(served.key))
            #expect(bad.status == 400)
            #expect(bad.body?["errorCode"]?.intValue == 4_000_031)
            let missing = try await API.get(served.base + "/inApps/v1/subscriptions/1999", token: try API.token(served.key))
            #expect(missing.body?["errorCode"]?.intValue == 4_040_010)
            // The renewal info's signature is checked like every payload: a client trusting another root refuses it.
            let foreign = try served.client(roots: [try JWSSigningPKI.generate().root])
            await #expect(throws: AppStoreAPIError.self) { try await foreign.subscriptionStatuses(monthly.transactionId) }
        }
    }

    @Test func refundHistoryPagesEveryRefundedTransaction() async throws {
        try await API.serve { served in
            let sim = served.simulator
            var refunded: [String] = []
            for i in 0..<24 {
                let bought = try await API.buy(sim, "coins.100", .consumable)
                if i % 8 != 0 {
                    _ = try await Self.blocking { try sim.refund(.init(appleId: "ann@icloud", transactionId: bought.transactionId)) }
                    refunded.append(bought.transactionId)
                }
            }
            #expect(refunded.count == 21)
            let first = try await API.get(served.base + "/inApps/v2/refund/lookup/\(refunded[0])", token: try API.token(served.key))
            #expect(first.body?["signedTransactions"]?.arrayValue?.count == 20)
            #expect(first.body?["hasMore"]?.boolValue == true)
            let all = try await served.client().refundHistory(refunded[0])
            #expect(all.compactMap(\.transactionId) == refunded)
            #expect(all.allSatisfy { $0.payload["revocationDate"] != nil })
        }
    }

    @Test func notificationsAreDeliveredRetriedOnTheSimulatedClockAndListedWithTheirAttempts() async throws {
        try await API.serve { served in
            let sim = served.simulator
            let receiver = try await NotificationReceiver.start()
            defer { receiver.stop() }
            try sim.setNotificationURL(.init(environment: .production, url: receiver.url))
            let startMs = try await Self.blocking { try sim.advanceClock(.init(seconds: 0)).nowMs } - 1_000
            // Delivered at once.
            let coins = try await API.buy(sim, "coins.100", .consumable)
            var pass = await sim.courier.deliver()
            #expect(receiver.payloads.withLockedValue { $0.count } == 1)
            // The webhook fails: Apple's schedule retries 1, 12, 24, 48 and 72 hours later, then gives up.
            receiver.failing.withLockedValue { $0 = true }
            let pack = try await API.buy(sim, "levels.pack1", .nonConsumable)
            let client = try served.client()
            func attempts() async throws -> [String] {
                var query = NotificationHistoryQuery(startDateMs: startMs, endDateMs: startMs + 400 * 86_400_000)
                query.transactionId = pack.transactionId
                return try await client.notificationHistory(.production, query).records.flatMap { $0.sendAttempts.map(\.result) }
            }
            pass = await sim.courier.deliver()
            #expect(try await attempts() == ["UNSUCCESSFUL_HTTP_RESPONSE_CODE"])
            #expect(pass.pendingRetries == 1)
            for (i, hours) in [1, 12, 24, 48, 72].enumerated() {
                _ = try await Self.blocking { try sim.advanceClock(.init(seconds: Int64(hours) * 3_600 - 60)) }
                _ = await sim.courier.deliver()
                #expect(try await attempts().count == i + 1, "not yet due \(hours) h after the last attempt")
                _ = try await Self.blocking { try sim.advanceClock(.init(seconds: 60)) }
                _ = await sim.courier.deliver()
                #expect(try await attempts().count == i + 2, "due \(hours) h after the last attempt")
            }
            pass = await sim.courier.deliver()
            #expect(pass.pendingRetries == 0)
            _ = try await Self.blocking { try sim.advanceClock(.init(seconds: 200 * 3_600)) }
            _ = await sim.courier.deliver()
            #expect(try await attempts().count == 6, "six attempts in all, then no more")

            var query = NotificationHistoryQuery(startDateMs: startMs, endDateMs: startMs + 400 * 86_400_000)
            var page = try await client.notificationHistory(.production, query)
            #expect(page.records.count == 2)
            let failed = try #require(
                page.records.first { $0.notification.payload["data"]?["signedTransactionInfo"] != nil && $0.sendAttempts.count == 6 })
            #expect(failed.sendAttempts.map(\.result) == Array(repeating: "UNSUCCESSFUL_HTTP_RESPONSE_CODE", count: 6))
            let gaps = zip(failed.sendAttempts.dropFirst(), failed.sendAttempts).map { ($0.attemptDateMs - $1.attemptDateMs) / 3_600_000 }
            #expect(gaps == [1, 12, 24, 48, 72])
            query.onlyFailures = true
            page = try await client.notificationHistory(.production, query)
            #expect(page.records.count == 1)
            #expect(page.records.first?.notification.payload["notificationType"]?.stringValue == "ONE_TIME_CHARGE")
            query.onlyFailures = nil
            query.transactionId = coins.transactionId
            page = try await client.notificationHistory(.production, query)
            #expect(page.records.map { $0.sendAttempts.map(\.result) } == [["SUCCESS"]])
            // Apple's 400s: type and transaction together, an unknown type, a start more than 180 days back.
            let token = try API.token(served.key)
            let url = served.base + "/inApps/v1/notifications/history"
            for (body, code) in [
                (
                    #"{"startDate":\#(startMs),"endDate":\#(startMs + 1000),"notificationType":"REFUND","transactionId":"\#(coins.transactionId)"}"#,
                    4_000_019
                ),
                (#"{"startDate":\#(startMs),"endDate":\#(startMs + 1000),"notificationType":"NOPE"}"#, 4_000_018),
                (#"{"startDate":1,"endDate":\#(startMs)}"#, 4_000_012), (#"{"endDate":\#(startMs)}"#, 4_000_015),
            ] {
                let answer = try await Self.send(.POST, url, token: token, body: body)
                #expect(answer.status == 400 && answer.body?["errorCode"]?.intValue == Int64(code), "\(body)")
            }
        }
    }

    @Test func historyPagesTwentyAtATimeAndSandboxIsNotRetried() async throws {
        try await API.serve { served in
            let sim = served.simulator
            let startMs = try await Self.blocking { try sim.advanceClock(.init(seconds: 0)).nowMs } - 1_000
            for _ in 0..<25 { _ = try await API.buy(sim, "coins.100", .consumable) }
            let client = try served.client()
            var pages: [Int] = []
            for try await page in client.notificationHistoryPages(.production, .init(startDateMs: startMs, endDateMs: startMs + 86_400_000)) {
                pages.append(page.records.count)
            }
            #expect(pages == [20, 5])
            // Sandbox: one attempt only.
            let receiver = try await NotificationReceiver.start()
            defer { receiver.stop() }
            receiver.failing.withLockedValue { $0 = true }
            try sim.setNotificationURL(.init(environment: .sandbox, url: receiver.url))
            _ = try await API.buy(sim, "coins.100", .consumable, environment: .sandbox)
            let pass = await sim.courier.deliver()
            #expect(pass.pendingRetries == 0)
            let sandbox = try await client.notificationHistory(.sandbox, .init(startDateMs: startMs, endDateMs: startMs + 86_400_000))
            #expect(sandbox.records.map { $0.sendAttempts.map(\.result) } == [["UNSUCCESSFUL_HTTP_RESPONSE_CODE"]])
            _ = try await Self.blocking { try sim.advanceClock(.init(seconds: 100 * 3_600)) }
            _ = await sim.courier.deliver()
            let later = try await client.notificationHistory(.sandbox, .init(startDateMs: startMs, endDateMs: startMs + 10 * 86_400_000))
            #expect(later.records.map(\.sendAttempts.count) == [1])
        }
    }

    @Test func aTestNotificationIsSentAndItsStatusRead() async throws {
        try await API.serve { served in
            let receiver = try await NotificationReceiver.start()
            defer { receiver.stop() }
            _ = try await API.buy(served.simulator, "coins.100", .consumable)  // the app exists in this App Store
            try served.simulator.setNotificationURL(.init(environment: .production, url: receiver.url))
            let client = try served.client()
            let token = try await client.requestTestNotification(.production)
            _ = await served.simulator.courier.deliver()
            let status = try await client.testNotificationStatus(.production, token: token)
            #expect(status.notification.payload["notificationType"]?.stringValue == "TEST")
            #expect(status.sendAttempts.map(\.result) == ["SUCCESS"])
            #expect(receiver.payloads.withLockedValue { $0 }.contains(status.notification.signed))
            let bearer = try API.token(served.key)
            #expect(
                try await API.get(served.base + "/inApps/v1/notifications/test/nonsense", token: bearer).body?["errorCode"]?.intValue == 4_000_020)
            let unknown = try await API.get(served.base + "/inApps/v1/notifications/test/\(UUID().uuidString)_1", token: bearer)
            #expect(unknown.status == 404 && unknown.body?["errorCode"]?.intValue == 4_040_008)
        }
    }

    @Test func consumptionAppAccountTokenAndRenewalExtension() async throws {
        try await API.serve { served in
            let sim = served.simulator
            let client = try served.client()
            let coins = try await API.buy(sim, "coins.100", .consumable)
            // v2 (what the client sends): Apple's strings; the rules that tie its fields together are checked.
            let answer = AppleConsumptionRequest(
                customerConsented: true, deliveryStatus: .delivered, sampleContentProvided: false, consumptionPercentage: 40_000,
                refundPreference: .grantProrated)
            try await client.sendConsumption(coins.transactionId, answer)
            let reports = try sim.consumptionReports(.init(transactionId: coins.transactionId)).reports
            #expect(reports.first?["deliveryStatus"]?.stringValue == "DELIVERED" && reports.first?["consumptionPercentage"]?.intValue == 40_000)
            let bearer = try API.token(served.key)
            let v2 = served.base + "/inApps/v2/transactions/consumption/\(coins.transactionId)"
            let refusals: [(String, Int64)] = [
                (#"{"customerConsented":false,"deliveryStatus":"DELIVERED","sampleContentProvided":false}"#, 4_000_035),
                (#"{"customerConsented":true,"deliveryStatus":"WORKING","sampleContentProvided":false}"#, 4_000_036),
                (#"{"customerConsented":true,"deliveryStatus":"DELIVERED"}"#, 4_000_041),
                (#"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":false,"refundPreference":"HALF"}"#, 4_000_044),
                (#"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":false,"consumptionPercentage":100001}"#, 4_000_000),
                (
                    #"{"customerConsented":true,"deliveryStatus":"UNDELIVERED_OTHER","sampleContentProvided":false,"consumptionPercentage":5}"#,
                    4_000_000
                ),
                (
                    #"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":false,"consumptionPercentage":100000,"refundPreference":"GRANT_PRORATED"}"#,
                    4_000_000
                ),
            ]
            for (body, code) in refusals {
                let refused = try await Self.send(.PUT, v2, token: bearer, body: body)
                #expect(refused.status == 400 && refused.body?["errorCode"]?.intValue == code, "\(body)")
            }
            let renewing = try await API.buy(sim, "sub.premium", .autoRenewable)
            let onSubscription = try await Self.send(
                .PUT, served.base + "/inApps/v2/transactions/consumption/\(renewing.transactionId)", token: bearer,
                body: #"{"customerConsented":true,"deliveryStatus":"DELIVERED","sampleContentProvided":false,"consumptionPercentage":0}"#)
            #expect(onSubscription.status == 400 && onSubscription.body?["errorCode"]?.intValue == 4_000_209)
            #expect(try sim.consumptionReports(.init(transactionId: coins.transactionId)).reports.count == 1, "no refusal was recorded")
            // v1, kept for older clients: its numeric codes and ranges.
            let consumptionURL = served.base + "/inApps/v1/transactions/consumption/\(coins.transactionId)"
            let v1 = try await Self.send(
                .PUT, consumptionURL, token: bearer,
                body:
                    #"{"customerConsented":true,"consumptionStatus":3,"platform":1,"sampleContentProvided":false,"deliveryStatus":0,"appAccountToken":"","accountTenure":2,"playTime":0,"lifetimeDollarsRefunded":0,"lifetimeDollarsPurchased":1,"userStatus":1}"#
            )
            #expect(v1.status == 202)
            #expect(try sim.consumptionReports(.init(transactionId: coins.transactionId)).reports.last?["consumptionStatus"]?.intValue == 3)
            let outOfRange = try await Self.send(
                .PUT, consumptionURL, token: bearer,
                body:
                    #"{"customerConsented":true,"consumptionStatus":7,"platform":1,"sampleContentProvided":false,"deliveryStatus":0,"appAccountToken":"","accountTenure":0,"playTime":0,"lifetimeDollarsRefunded":0,"lifetimeDollarsPurchased":0,"userStatus":1}"#
            )
            #expect(outOfRange.status == 400 && outOfRange.body?["errorCode"]?.intValue == 4_000_034)
            let noConsent = try await Self.send(.PUT, consumptionURL, token: bearer, body: #"{"customerConsented":false}"#)
            #expect(noConsent.body?["errorCode"]?.intValue == 4_000_035)

            // Set App Account Token on a purchase made without one; a non-original id and a non-UUID are refused.
            let pack = try await API.buy(sim, "levels.pack1", .nonConsumable)
            let again = try await API.buy(sim, "levels.pack1", .nonConsumable)
            let account = UUID().uuidString.lowercased()
            try await client.setAppAccountToken(originalTransactionId: pack.originalTransactionId, appAccountToken: account)
            #expect(try await client.transactionInfo(again.transactionId).payload["appAccountToken"]?.stringValue == account)
            let notOriginal = try await Self.send(
                .PUT, served.base + "/inApps/v1/transactions/\(again.transactionId)/appAccountToken", token: bearer,
                body: #"{"appAccountToken":"\#(account)"}"#)
            #expect(notOriginal.body?["errorCode"]?.intValue == 4_000_187)
            let notUUID = try await Self.send(
                .PUT, served.base + "/inApps/v1/transactions/\(pack.transactionId)/appAccountToken", token: bearer, body: #"{"appAccountToken":"x"}"#)
            #expect(notUUID.body?["errorCode"]?.intValue == 4_000_183)

            // Extensions: 7 days each, the same request id is not applied twice, two at most, RENEWAL_EXTENDED sent.
            let sub = try await API.buy(sim, "sub.monthly", .autoRenewable)
            let expires = try #require(try await client.transactionInfo(sub.transactionId).payload["expiresDate"]?.intValue)
            let first = try await client.extendRenewalDate(
                originalTransactionId: sub.originalTransactionId, days: 7, reasonCode: 3, requestIdentifier: "r1")
            #expect(first.success && first.effectiveDateMs == expires + 7 * 86_400_000)
            let repeated = try await client.extendRenewalDate(
                originalTransactionId: sub.originalTransactionId, days: 7, reasonCode: 3, requestIdentifier: "r1")
            #expect(repeated.effectiveDateMs == first.effectiveDateMs)
            _ = try await client.extendRenewalDate(originalTransactionId: sub.originalTransactionId, days: 7, reasonCode: 3, requestIdentifier: "r2")
            #expect(try await client.transactionInfo(sub.transactionId).payload["expiresDate"]?.intValue == expires + 14 * 86_400_000)
            await #expect(
                throws: AppStoreAPIError.api(
                    httpStatus: 403, errorCode: 4_030_005, message: "Forbidden - subscription has reached maximum extension count.")
            ) {
                _ = try await client.extendRenewalDate(
                    originalTransactionId: sub.originalTransactionId, days: 7, reasonCode: 3, requestIdentifier: "r3")
            }
            let extendURL = served.base + "/inApps/v1/subscriptions/extend/\(sub.originalTransactionId)"
            for (body, code) in [
                (#"{"extendByDays":91,"extendReasonCode":3,"requestIdentifier":"x"}"#, 4_000_009),
                (#"{"extendByDays":1,"extendReasonCode":4,"requestIdentifier":"x"}"#, 4_000_010),
                (#"{"extendByDays":1,"extendReasonCode":3}"#, 4_000_011),
            ] {
                #expect(try await Self.send(.PUT, extendURL, token: bearer, body: body).body?["errorCode"]?.intValue == Int64(code), "\(body)")
            }
            let notASubscription = try await Self.send(
                .PUT, served.base + "/inApps/v1/subscriptions/extend/\(pack.originalTransactionId)", token: bearer,
                body: #"{"extendByDays":1,"extendReasonCode":3,"requestIdentifier":"x"}"#)
            #expect(notASubscription.status == 403 && notASubscription.body?["errorCode"]?.intValue == 4_030_004)
            let nowMs = try await Self.blocking { try sim.advanceClock(.init(seconds: 0)).nowMs }
            var query = NotificationHistoryQuery(startDateMs: nowMs - 86_400_000, endDateMs: nowMs + 1)
            query.notificationType = "RENEWAL_EXTENDED"
            #expect(try await client.notificationHistory(.production, query).records.count == 2)
        }
    }
}

/// A man in the middle between the client and the App Store: it relays the real answer with the signed
/// transaction's payload rewritten (another product) and the signature left as it was.
@Suite struct TamperedPayloadTests {
    @Test func aPayloadChangedAfterSigningIsRefused() async throws {
        try await AppStoreServerAPITests.serve { served in
            let bought = try await AppStoreServerAPITests.buy(served.simulator, "coins.100", .consumable)
            let router = Router()
            let upstream = served.base
            let key = served.key
            router.get("inApps/v1/transactions/:id") { _, context -> Response in
                let real = try await AppStoreServerAPITests.get(
                    upstream + "/inApps/v1/transactions/" + (context.parameters.get("id") ?? ""), token: try AppStoreServerAPITests.token(key))
                let jws = real.body?["signedTransactionInfo"]?.stringValue ?? ""
                let parts = jws.split(separator: ".").map(String.init)
                var base64 = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
                while base64.count % 4 != 0 { base64 += "=" }
                let payload = try #require(Data(base64Encoded: base64))
                let forged = String(decoding: payload, as: UTF8.self).replacingOccurrences(of: "coins.100", with: "coins.999")
                let tampered = [parts[0], JWSSigningPKI.base64URL(Array(forged.utf8)), parts[2]].joined(separator: ".")
                let body = try JSONSerialization.data(withJSONObject: ["signedTransactionInfo": tampered])
                return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: body)))
            }
            var quiet = Logger(label: "mitm")
            quiet.logLevel = .critical
            let (ports, continuation) = AsyncStream<Int>.makeStream()
            let application = Application(
                router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
                onServerRunning: { continuation.yield($0.localAddress?.port ?? 0) }, logger: quiet)
            let app = Task { try await application.run() }
            defer { app.cancel() }
            var iterator = ports.makeAsyncIterator()
            let port = try #require(await iterator.next())
            let client = try served.client { $0.productionURL = "http://127.0.0.1:\(port)" }
            do {
                _ = try await client.transactionInfo(bought.transactionId)
                Issue.record("a tampered payload was accepted")
            } catch let error as AppStoreAPIError {
                guard case .verification = error else { Issue.record("expected a verification failure, got \(error)"); return }
            }
            // Through the real App Store the same call verifies.
            #expect(try await served.client().transactionInfo(bought.transactionId).payload["productId"]?.stringValue == "coins.100")
        }
    }
}

/// The simulator's subscription and refund events: billing failure with and without grace, recovery,
/// expiry after 60 days of retries, refund requests, declines and reversals, and delivery faults.
@Suite struct SimulatorLifecycleEventTests {
    typealias API = AppStoreServerAPITests

    static func types(_ client: AppStoreServerAPIClient, since startMs: Int64) async throws -> [String] {
        var out: [String] = []
        for try await page in client.notificationHistoryPages(.production, .init(startDateMs: startMs, endDateMs: startMs + 400 * 86_400_000)) {
            out += page.records.map {
                [$0.notification.payload["notificationType"]?.stringValue, $0.notification.payload["subtype"]?.stringValue].compactMap { $0 }
                    .joined(separator: "/")
            }
        }
        return out
    }

    @Test func billingFailsIntoGraceThenRetryAndRecoversOrExpiresAfterSixtyDays() async throws {
        try await API.serve { served in
            let sim = served.simulator
            let client = try served.client()
            let startMs = try await AppStoreServerAPISubscriptionTests.blocking { try sim.advanceClock(.init(seconds: 0)).nowMs } - 1_000
            let graced = try await API.buy(sim, "sub.monthly", .autoRenewable)
            let lapsing = try await API.buy(sim, "sub.yearly", .autoRenewable, appleId: "bo@icloud")
            let expires = try #require(try await client.transactionInfo(graced.transactionId).payload["expiresDate"]?.intValue)
            try await AppStoreServerAPISubscriptionTests.blocking {
                _ = try sim.billing(.init(appleId: "ann@icloud", transactionId: graced.transactionId, event: .fail, gracePeriodDays: 6))
                _ = try sim.billing(.init(appleId: "bo@icloud", transactionId: lapsing.transactionId, event: .fail))
                _ = try sim.advanceClock(.init(seconds: 31 * 86_400))
            }
            var status = try #require(try await client.subscriptionStatuses(graced.transactionId).first)
            #expect(status.status == 4, "in its grace period")
            #expect(status.renewalInfo.payload["isInBillingRetryPeriod"]?.boolValue == true)
            #expect(status.renewalInfo.payload["gracePeriodExpiresDate"]?.intValue == expires + 6 * 86_400_000)
            #expect(try await client.subscriptionStatuses(lapsing.transactionId).first?.status == 3, "billing retry, no grace")
            _ = try await AppStoreServerAPISubscriptionTests.blocking { try sim.advanceClock(.init(seconds: 6 * 86_400)) }
            status = try #require(try await client.subscriptionStatuses(graced.transactionId).first)
            #expect(status.status == 3, "grace over, still retrying")
            let recovered = try await AppStoreServerAPISubscriptionTests.blocking {
                try sim.billing(.init(appleId: "ann@icloud", transactionId: graced.transactionId, event: .recover))
            }
            #expect(recovered.signedPayload != nil)
            status = try #require(try await client.subscriptionStatuses(graced.transactionId).first)
            #expect(status.status == 1 && status.renewalInfo.payload["isInBillingRetryPeriod"]?.boolValue == false)
            _ = try await AppStoreServerAPISubscriptionTests.blocking { try sim.advanceClock(.init(seconds: 60 * 86_400)) }
            let lapsed = try #require(try await client.subscriptionStatuses(lapsing.transactionId).first)
            #expect(lapsed.status == 2 && lapsed.renewalInfo.payload["expirationIntent"]?.intValue == 2)
            let types = try await Self.types(client, since: startMs)
            for expected in [
                "DID_FAIL_TO_RENEW/GRACE_PERIOD", "DID_FAIL_TO_RENEW", "GRACE_PERIOD_EXPIRED", "DID_RENEW/BILLING_RECOVERY", "EXPIRED/BILLING_RETRY",
            ] {
                #expect(types.contains(expected), "\(expected) in \(types)")
            }
            #expect(types.filter { $0 == "EXPIRED/BILLING_RETRY" }.count == 1, "expired once")
        }
    }

    @Test func refundRequestsDeclinesAndReversals() async throws {
        try await API.serve { served in
            let sim = served.simulator
            let client = try served.client()
            let startMs = try await AppStoreServerAPISubscriptionTests.blocking { try sim.advanceClock(.init(seconds: 0)).nowMs } - 1_000
            let coins = try await API.buy(sim, "coins.100", .consumable)
            try await AppStoreServerAPISubscriptionTests.blocking {
                _ = try sim.refundDecision(.init(appleId: "ann@icloud", transactionId: coins.transactionId, event: .request))
                _ = try sim.refundDecision(.init(appleId: "ann@icloud", transactionId: coins.transactionId, event: .decline))
                _ = try sim.refund(.init(appleId: "ann@icloud", transactionId: coins.transactionId))
            }
            #expect(try await client.transactionInfo(coins.transactionId).payload["revocationDate"] != nil)
            _ = try await AppStoreServerAPISubscriptionTests.blocking {
                try sim.refundDecision(.init(appleId: "ann@icloud", transactionId: coins.transactionId, event: .reverse))
            }
            #expect(try await client.transactionInfo(coins.transactionId).payload["revocationDate"] == nil, "valid again")
            #expect(
                try await Self.types(client, since: startMs)
                    == ["ONE_TIME_CHARGE", "CONSUMPTION_REQUEST", "REFUND_DECLINED", "REFUND", "REFUND_REVERSED"])
        }
    }

    @Test func deliveriesCanBeDroppedAndDuplicated() async throws {
        try await API.serve { served in
            let sim = served.simulator
            let receiver = try await NotificationReceiver.start()
            defer { receiver.stop() }
            try sim.setNotificationURL(.init(environment: .production, url: receiver.url))
            try sim.courier.setFault(.init(dropPercent: 100))
            let dropped = try await API.buy(sim, "coins.100", .consumable)
            let pass = await sim.courier.deliver()
            #expect(pass.pendingRetries == 1)
            #expect(receiver.payloads.withLockedValue { $0 }.isEmpty)
            try sim.courier.setFault(.init(duplicatePercent: 100))
            _ = try await AppStoreServerAPISubscriptionTests.blocking { try sim.advanceClock(.init(seconds: 3_600)) }
            _ = await sim.courier.deliver()
            let payloads = receiver.payloads.withLockedValue { $0 }
            #expect(payloads.count == 2 && Set(payloads).count == 1, "the retry of the dropped one, sent twice")
            var query = NotificationHistoryQuery(startDateMs: 0, endDateMs: 0)
            query.startDateMs = try await AppStoreServerAPISubscriptionTests.blocking { try sim.advanceClock(.init(seconds: 0)).nowMs } - 86_400_000
            query.endDateMs = query.startDateMs + 2 * 86_400_000
            query.transactionId = dropped.transactionId
            let attempts = try await served.client().notificationHistory(.production, query).records.flatMap { $0.sendAttempts.map(\.result) }
            #expect(attempts == ["TIMED_OUT", "SUCCESS"])
            #expect(throws: RPCError.self) { try sim.courier.setFault(.init(delayMs: 20_000)) }
        }
    }
}
