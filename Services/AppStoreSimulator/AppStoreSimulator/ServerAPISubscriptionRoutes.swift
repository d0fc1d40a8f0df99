import Foundation
import Hummingbird
import IAPProtocol
import JSONRPC

/// Get All Subscription Statuses, Get Refund History v2, Send Consumption Information, Set App Account
/// Token, Extend a Subscription Renewal Date and Finish Transaction, as Apple documents them.
extension AppStoreServerAPIEndpoint {
    func addSubscriptionRoutes(to router: Router<BasicRequestContext>, prefix: String, environment: SimEnvironment) {
        router.get(RouterPath("\(prefix)inApps/v1/subscriptions/:id")) { request, context -> Response in
            await self.respond(request) { bid in
                try self.statuses(context.parameters.get("id") ?? "", query: Self.query(request), environment: environment, bid: bid)
            }
        }
        router.get(RouterPath("\(prefix)inApps/v2/refund/lookup/:id")) { request, context -> Response in
            await self.respond(request) { bid in
                try self.refundHistory(context.parameters.get("id") ?? "", query: Self.query(request), environment: environment, bid: bid)
            }
        }
        router.put(RouterPath("\(prefix)inApps/v1/transactions/consumption/:id")) { request, context -> Response in
            await self.respond(request, status: .accepted) { bid, body in
                try self.consumption(context.parameters.get("id") ?? "", body: body, environment: environment, bid: bid)
                return nil
            }
        }
        // Send Consumption Information v2 (API 1.19): Apple's strings; v1 above stays for older clients.
        router.put(RouterPath("\(prefix)inApps/v2/transactions/consumption/:id")) { request, context -> Response in
            await self.respond(request, status: .accepted) { bid, body in
                try self.consumptionV2(context.parameters.get("id") ?? "", body: body, environment: environment, bid: bid)
                return nil
            }
        }
        router.put(RouterPath("\(prefix)inApps/v1/transactions/:id/appAccountToken")) { request, context -> Response in
            await self.respond(request) { bid, body in
                try self.setAppAccountToken(context.parameters.get("id") ?? "", body: body, environment: environment, bid: bid)
                return nil
            }
        }
        // Finish Transaction (API 1.20): no body either way; 400 4000006 for an id that is not one, 404 4040010 for one
        // this app and environment do not have.
        router.post(RouterPath("\(prefix)inApps/v1/transactions/:id/finish")) { request, context -> Response in
            await self.respond(request) { bid, _ in
                let t = try self.transaction(context.parameters.get("id") ?? "", environment: environment, bid: bid)
                try self.simulator.api.apiFinish(t.transactionId)
                return nil
            }
        }
        router.put(RouterPath("\(prefix)inApps/v1/subscriptions/extend/:id")) { request, context -> Response in
            await self.respond(request) { bid, body in
                try self.extend(context.parameters.get("id") ?? "", body: body, environment: environment, bid: bid)
            }
        }
    }

    /// `extendByDays` (1-90, else 4000009) and `extendReasonCode` (0-3, else 4000010), single or mass extension alike.
    static func extensionTerms(_ object: [String: Any]) throws -> (days: Int, reason: Int) {
        guard let days = (object["extendByDays"] as? NSNumber)?.intValue, (1...90).contains(days) else {
            throw APIError.badRequest(4_000_009, "Invalid extend by days value.")
        }
        guard let reason = (object["extendReasonCode"] as? NSNumber)?.intValue, (0...3).contains(reason) else {
            throw APIError.badRequest(4_000_010, "Invalid extend reason code.")
        }
        return (days, reason)
    }

    /// A JSON object request body, else Apple's general bad request.
    static func object(_ body: [UInt8]) throws -> [String: Any] {
        guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any] else {
            throw APIError.badRequest(4_000_000, "Invalid request.")
        }
        return object
    }

    /// Get All Subscription Statuses: every subscription of the customer, grouped by subscription group,
    /// each with its latest transaction and renewal info, optionally only those with the given `status`es.
    func statuses(_ id: String, query: [String: [String]], environment: SimEnvironment, bid: String) throws -> [String: Any] {
        let anchor = try transaction(id, environment: environment, bid: bid)
        var wanted: Set<Int> = []
        for value in query["status"] ?? [] {
            guard let status = Int(value), (1...5).contains(status) else { throw APIError.badRequest(4_000_031, "Invalid status.") }
            wanted.insert(status)
        }
        let now = try simulator.nowMs()
        let lastTransactions = try simulator.api.apiSubscriptions(of: anchor).filter { wanted.isEmpty || wanted.contains($0.status) }.map {
            [
                "status": $0.status, "originalTransactionId": $0.latest.originalTransactionId,
                "signedTransactionInfo": try simulator.signedTransaction($0.latest, signedAt: now), "signedRenewalInfo": $0.renewalInfo,
            ] as [String: Any]
        }
        var answer: [String: Any] = [
            "environment": environment.appleName, "bundleId": anchor.bundleId,
            "data": lastTransactions.isEmpty ? [] : [["subscriptionGroupIdentifier": "sim-group", "lastTransactions": lastTransactions]],
        ]
        if environment == .production { answer["appAppleId"] = 1_234_567_890 }
        return answer
    }

    /// Get Refund History v2: the customer's refunded (revoked) transactions, 20 a page, `revision` to go on.
    func refundHistory(_ id: String, query: [String: [String]], environment: SimEnvironment, bid: String) throws -> [String: Any] {
        let anchor = try transaction(id, environment: environment, bid: bid)
        let after = try query["revision"]?.first.map { try Self.position($0, orThrow: .invalidRevision) } ?? 0
        let refunded = (try simulator.api.apiHistory(of: anchor.transactionId) ?? []).filter { $0.cancellationDateMs != nil && $0.seq > after }
        let page = Array(refunded.prefix(Self.pageSize))
        let now = try simulator.nowMs()
        return [
            "signedTransactions": try page.map { try simulator.signedTransaction($0, signedAt: now) },
            "revision": Self.token(page.last?.seq ?? after),
            "hasMore": refunded.count > page.count,
        ]
    }

    /// Send Consumption Information (ConsumptionRequest v1): every field checked against Apple's ranges, then
    /// recorded (`sim.consumptionReports`); 202.
    func consumption(_ id: String, body: [UInt8], environment: SimEnvironment, bid: String) throws {
        _ = try transaction(id, environment: environment, bid: bid)
        guard case .object(let object)? = try? JSONDecoder().decode(JSONValue.self, from: Data(body)) else {
            throw APIError.badRequest(4_000_000, "Invalid request.")
        }
        guard object["customerConsented"] == .bool(true) else {
            throw APIError.badRequest(
                4_000_035, "Invalid request. The customer consented field is required and must indicate the customer consented.")
        }
        let ranges: [(String, ClosedRange<Int64>, Int, Bool)] = [
            ("consumptionStatus", 0...3, 4_000_034, true), ("platform", 0...2, 4_000_039, true), ("deliveryStatus", 0...5, 4_000_036, true),
            ("accountTenure", 0...7, 4_000_032, true), ("playTime", 0...7, 4_000_040, true), ("lifetimeDollarsRefunded", 0...7, 4_000_038, true),
            ("lifetimeDollarsPurchased", 0...7, 4_000_037, true), ("userStatus", 0...4, 4_000_042, true),
            ("refundPreference", 0...3, 4_000_000, false),
        ]
        for (key, range, code, required) in ranges {
            switch object[key] {
            case nil where !required: continue
            case .int(let value)? where range.contains(value): continue
            default: throw APIError.badRequest(code, "Invalid request. \(key) is missing or out of range.")
            }
        }
        guard case .bool? = object["sampleContentProvided"] else {
            throw APIError.badRequest(4_000_041, "Invalid request. The sample content provided field is invalid.")
        }
        guard case .string(let token)? = object["appAccountToken"], token.isEmpty || UUID(uuidString: token) != nil else {
            throw APIError.badRequest(4_000_033, "Invalid request. The app account token field must be a valid UUID or an empty string.")
        }
        try simulator.api.apiRecordConsumption(id, body: String(decoding: body, as: UTF8.self))
    }

    /// Send Consumption Information v2: Apple's ConsumptionRequest rules ("ConsumptionRequest", "consumptionPercentage").
    /// Two of Apple's refusals have no documented number (ConsumptionPercentageOutOfRangeError,
    /// UndeliveredConsumptionPercentageNonZeroError): answered 400 with the general 4000000 and the rule's name.
    func consumptionV2(_ id: String, body: [UInt8], environment: SimEnvironment, bid: String) throws {
        let t = try transaction(id, environment: environment, bid: bid)
        guard case .object(let object)? = try? JSONDecoder().decode(JSONValue.self, from: Data(body)) else {
            throw APIError.badRequest(4_000_000, "Invalid request.")
        }
        guard object["customerConsented"] == .bool(true) else {
            throw APIError.badRequest(
                4_000_035, "Invalid request. The customer consented field is required and must indicate the customer consented.")
        }
        let statuses = ["DELIVERED", "UNDELIVERED_QUALITY_ISSUE", "UNDELIVERED_WRONG_ITEM", "UNDELIVERED_SERVER_OUTAGE", "UNDELIVERED_OTHER"]
        guard case .string(let delivery)? = object["deliveryStatus"], statuses.contains(delivery) else {
            throw APIError.badRequest(4_000_036, "Invalid request. The delivery status field is invalid.")
        }
        guard case .bool? = object["sampleContentProvided"] else {
            throw APIError.badRequest(4_000_041, "Invalid request. The sample content provided field is invalid.")
        }
        var preference: String?
        if let value = object["refundPreference"] {
            guard case .string(let p) = value, ["DECLINE", "GRANT_FULL", "GRANT_PRORATED"].contains(p) else {
                throw APIError.badRequest(4_000_044, "Invalid request. The refund preference field is invalid.")
            }
            preference = p
        }
        if let value = object["consumptionPercentage"] {
            guard t.productType != .autoRenewable else {
                throw APIError.badRequest(
                    4_000_209,
                    "Invalid request. The consumption percentage field is not supported for auto-renewable subscription transactions.")
            }
            guard case .int(let percentage) = value, (0...100_000).contains(percentage) else {
                throw APIError.badRequest(
                    4_000_000, "Invalid request. ConsumptionPercentageOutOfRangeError: the consumption percentage is outside the valid range.")
            }
            guard delivery == "DELIVERED" || percentage == 0 else {
                throw APIError.badRequest(
                    4_000_000,
                    "Invalid request. UndeliveredConsumptionPercentageNonZeroError: the consumption percentage must be zero for the provided delivery status."
                )
            }
            if preference == "GRANT_PRORATED", !(1..<100_000).contains(percentage) {
                throw APIError.badRequest(
                    4_000_000, "Invalid request. ConsumptionPercentageOutOfRangeError: a prorated refund needs a percentage above 0 and below 100000."
                )
            }
        } else if preference == "GRANT_PRORATED", t.productType != .autoRenewable {
            throw APIError.badRequest(
                4_000_000, "Invalid request. ConsumptionPercentageOutOfRangeError: a prorated refund needs a consumption percentage.")
        }
        try simulator.api.apiRecordConsumption(t.transactionId, body: String(decoding: body, as: UTF8.self))
    }

    /// Set App Account Token: for an original transaction id, a UUID (`appAccountToken`).
    func setAppAccountToken(_ id: String, body: [UInt8], environment: SimEnvironment, bid: String) throws {
        guard !id.isEmpty, id.allSatisfy(\.isNumber) else { throw APIError.badRequest(4_000_008, "Invalid original transaction id.") }
        guard let t = try simulator.api.apiTransaction(id), t.environment == environment, t.bundleId == bid else {
            throw APIError(status: .notFound, code: 4_040_005, message: "Original transaction id not found.")
        }
        guard t.originalTransactionId == t.transactionId else {
            throw APIError.badRequest(4_000_187, "Invalid request. The transaction ID provided is not an original transaction ID.")
        }
        guard t.sharedFrom == nil else {  // FamilyTransactionNotSupportedError
            throw APIError.badRequest(4_000_185, "Invalid request. The endpoint does not support Family Sharing transactions.")
        }
        guard let token = try Self.object(body)["appAccountToken"] as? String, UUID(uuidString: token) != nil else {
            throw APIError.badRequest(4_000_183, "Invalid request. The app account token field must be a valid UUID.")
        }
        try simulator.api.apiSetAppAccountToken(id, token: token)
    }

    /// Extend a Subscription Renewal Date: `extendByDays` 1-90, `extendReasonCode` 0-3, `requestIdentifier`
    /// up to 128 characters; 403 4030004 for a subscription that is not active, 4030005 past two extensions.
    func extend(_ id: String, body: [UInt8], environment: SimEnvironment, bid: String) throws -> [String: Any] {
        guard !id.isEmpty, id.allSatisfy(\.isNumber) else { throw APIError.badRequest(4_000_008, "Invalid original transaction id.") }
        guard let t = try simulator.api.apiTransaction(id), t.environment == environment, t.bundleId == bid else {
            throw APIError(status: .notFound, code: 4_040_005, message: "Original transaction id not found.")
        }
        let object = try Self.object(body)
        let (days, reason) = try Self.extensionTerms(object)
        guard let requestIdentifier = object["requestIdentifier"] as? String, (1...128).contains(requestIdentifier.count) else {
            throw APIError.badRequest(4_000_011, "Invalid request identifier.")
        }
        guard t.productType == .autoRenewable else {
            throw APIError(status: .forbidden, code: 4_030_004, message: "Forbidden - subscription state ineligible for extension.")
        }
        switch try simulator.api.apiExtend(t, days: days, requestIdentifier: requestIdentifier) {
        case .ineligible:
            throw APIError(status: .forbidden, code: 4_030_004, message: "Forbidden - subscription state ineligible for extension.")
        case .maxExtensions:
            throw APIError(status: .forbidden, code: 4_030_005, message: "Forbidden - subscription has reached maximum extension count.")
        case .extended(let effective, let lineItem):
            return ["effectiveDate": effective, "originalTransactionId": t.originalTransactionId, "webOrderLineItemId": lineItem, "success": true]
        }
    }
}
